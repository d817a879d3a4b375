"""Run assembly: group spans by trace id and decide when a run is finished.

A run is finished when its root span has ended and no span of the trace has arrived
for ``quiet_period_s``, or when the trace has been idle for ``max_idle_s`` (then it is
closed as incomplete). Spans arrive in any order and across many records; duplicates
(OTLP retries) are merged on span id.

Closed runs stay in a bounded cache of their spans. Spans that arrive for a closed run
are *late*: they are counted, the run is reopened with all its spans, and it closes
again after the quiet period with ``rescore=True`` so the stored record is updated
rather than duplicated. Late spans for a run already evicted from the cache cannot be
merged: they are counted as ``late_evicted`` and dropped.

Everything is bounded: in-flight runs (the oldest is force-closed as incomplete when
the cap is hit), spans per run (extra spans dropped) and the closed-run cache. The
clock is injected so tests never sleep. Not thread-safe: one assembler per worker.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from collector.model import Span, TraceBatch, fast_constructor

DEFAULT_QUIET_PERIOD_S = 2.0
"""Seconds without a new span after the root ended before a run is scored."""
DEFAULT_MAX_IDLE_S = 300.0
"""Seconds a trace may stay idle before it is scored as incomplete."""
DEFAULT_MAX_INFLIGHT = 100_000
"""Runs being assembled at once."""
DEFAULT_MAX_SPANS_PER_RUN = 10_000
"""Spans kept per run; more are dropped and counted."""
DEFAULT_CLOSED_CACHE = 5_000
"""Recently closed runs remembered to recognise late spans."""


class AssemblerObserver(Protocol):
    """Receives the assembler's counted events (implemented by :class:`scorers.metrics.RunMetrics`)."""

    def assembler_event(self, event: str, count: int = 1) -> None:
        """Count ``count`` occurrences of ``event`` (a closed set of names, see module doc)."""


@dataclass(frozen=True, slots=True)
class ClosedTrace:
    """A trace whose run is ready to normalise and score.

    Attributes:
        trace_id: the trace.
        spans: every distinct span received for it.
        complete: False when closed by the idle timeout or by the in-flight cap.
        rescore: True when the run was scored before and late spans reopened it.
    """

    trace_id: str
    spans: tuple[Span, ...]
    complete: bool
    rescore: bool = False


_new_closed = fast_constructor(ClosedTrace)


@dataclass(slots=True)
class _Pending:
    spans: dict[str, Span]
    last_seen: float
    root_ended: bool = False
    rescore: bool = False
    deadline: float = 0.0
    extra: list[Span] = field(default_factory=list)


class Assembler:
    """Groups spans into runs and releases finished runs.

    Args:
        quiet_period_s: quiet time after the root ended before the run closes.
        max_idle_s: idle time after which a run closes as incomplete.
        max_inflight: cap on runs being assembled; the one due soonest is force-closed.
        max_spans_per_run: spans beyond this per run are dropped and counted.
        closed_cache_size: closed runs kept to merge late spans into.
        clock: monotonic seconds (injected in tests).
        observer: receives counted events: ``spans_dropped_cap``, ``evicted_inflight``,
            ``late_spans``, ``late_evicted``, ``duplicate_spans``.
    """

    def __init__(
        self,
        *,
        quiet_period_s: float = DEFAULT_QUIET_PERIOD_S,
        max_idle_s: float = DEFAULT_MAX_IDLE_S,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        max_spans_per_run: int = DEFAULT_MAX_SPANS_PER_RUN,
        closed_cache_size: int = DEFAULT_CLOSED_CACHE,
        clock: Callable[[], float] = time.monotonic,
        observer: AssemblerObserver | None = None,
    ) -> None:
        self._quiet = quiet_period_s
        self._idle = max_idle_s
        self._max_inflight = max_inflight
        self._max_spans = max_spans_per_run
        self._closed_size = closed_cache_size
        self._clock = clock
        self._observer = observer
        self._pending: dict[str, _Pending] = {}
        self._heap: list[tuple[float, str]] = []
        self._closed: OrderedDict[str, tuple[Span, ...]] = OrderedDict()
        self._recently_evicted: OrderedDict[str, None] = OrderedDict()

    @property
    def inflight(self) -> int:
        """Number of runs being assembled."""
        return len(self._pending)

    def is_open(self, trace_id: str) -> bool:
        """Whether ``trace_id`` is being assembled (it has spans and has not closed)."""
        return trace_id in self._pending

    def add(self, batch: TraceBatch) -> list[ClosedTrace]:
        """Add one record's spans.

        Returns:
            Runs force-closed to respect the in-flight cap (usually empty).
        """
        now = self._clock()
        trace_id = batch.trace_id
        pending = self._pending.get(trace_id)
        forced: list[ClosedTrace] = []
        if pending is None:
            pending = self._open(trace_id, batch, now)
            if pending is None:
                return forced
            if len(self._pending) >= self._max_inflight:
                forced.extend(self._evict_one())
            self._pending[trace_id] = pending
        self._merge(pending, batch.spans)
        pending.last_seen = now
        self._schedule(trace_id, pending)
        return forced

    def due(self) -> list[ClosedTrace]:
        """Pop every run whose deadline has passed, in deadline order."""
        now = self._clock()
        out: list[ClosedTrace] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, trace_id = heapq.heappop(heap)
            pending = self._pending.get(trace_id)
            if pending is None or pending.deadline != deadline:
                continue  # stale heap entry: the run got newer spans
            out.append(self._close(trace_id, pending))
        return out

    def drain(self, *, finished_only: bool = False) -> list[ClosedTrace]:
        """Close in-flight runs now (shutdown); runs whose root ended count as complete.

        Args:
            finished_only: close only runs whose root span has ended; the others stay in
                flight (to be saved with :meth:`export_state` and resumed after a restart).
        """
        out = [self._close(tid, p) for tid, p in list(self._pending.items()) if p.root_ended or not finished_only]
        if not self._pending:
            self._heap.clear()
        return out

    def export_state(self) -> tuple[list[tuple[str, tuple[Span, ...]]], list[tuple[str, tuple[Span, ...]]]]:
        """The spans of every in-flight run and of every cached closed run, oldest first.

        Returns:
            ``(in_flight, closed)`` lists of ``(trace_id, spans)``.
        """
        in_flight = [(tid, tuple(p.spans.values())) for tid, p in self._pending.items()]
        return in_flight, list(self._closed.items())

    def import_state(
        self, in_flight: Sequence[tuple[str, Sequence[Span]]], closed: Sequence[tuple[str, Sequence[Span]]]
    ) -> None:
        """Restore what :meth:`export_state` returned (at start-up, before any span arrives).

        Closed runs go back into the late-span cache; in-flight runs resume with their idle
        and quiet clocks restarted now.
        """
        for trace_id, spans in closed:
            self._remember_closed(trace_id, tuple(spans))
        now = self._clock()
        for trace_id, spans in in_flight:
            pending = _Pending(spans={}, last_seen=now)
            self._pending[trace_id] = pending
            self._merge(pending, tuple(spans))
            self._schedule(trace_id, pending)

    def next_deadline(self) -> float | None:
        """Monotonic time of the earliest pending deadline (may be stale), or None."""
        return self._heap[0][0] if self._heap else None

    def _open(self, trace_id: str, batch: TraceBatch, now: float) -> _Pending | None:
        old = self._closed.pop(trace_id, None)
        if old is None:
            if trace_id in self._recently_evicted:
                self._count("late_evicted", len(batch.spans))
                return None
            return _Pending(spans={}, last_seen=now)
        known = {s.span_id for s in old}
        fresh = [s for s in batch.spans if s.span_id not in known]
        if not fresh:
            self._count("duplicate_spans", len(batch.spans))
            self._remember_closed(trace_id, old)
            return None
        self._count("late_spans", len(fresh))
        pending = _Pending(spans={s.span_id: s for s in old}, last_seen=now, rescore=True)
        pending.root_ended = any(s.parent_span_id is None and s.end_ns for s in old)
        return pending

    def _merge(self, pending: _Pending, spans: tuple[Span, ...]) -> None:
        store = pending.spans
        dropped = 0
        for span in spans:
            if span.span_id not in store and len(store) >= self._max_spans:
                dropped += 1
                continue
            previous = store.get(span.span_id)
            if previous is not None and previous.end_ns and not span.end_ns:
                continue  # keep the ended version of a duplicated span
            store[span.span_id] = span
            if span.parent_span_id is None and span.end_ns:
                pending.root_ended = True
        if dropped:
            self._count("spans_dropped_cap", dropped)

    def _schedule(self, trace_id: str, pending: _Pending) -> None:
        wait = self._quiet if pending.root_ended else self._idle
        pending.deadline = pending.last_seen + wait
        heapq.heappush(self._heap, (pending.deadline, trace_id))

    def _evict_one(self) -> list[ClosedTrace]:
        while self._heap:
            deadline, trace_id = heapq.heappop(self._heap)
            pending = self._pending.get(trace_id)
            if pending is not None and pending.deadline == deadline:
                self._count("evicted_inflight")
                return [self._close(trace_id, pending, forced=True)]
        return []

    def _close(self, trace_id: str, pending: _Pending, *, forced: bool = False) -> ClosedTrace:
        del self._pending[trace_id]
        spans = tuple(pending.spans.values())
        self._remember_closed(trace_id, spans)
        complete = pending.root_ended and not forced
        return _new_closed(trace_id, spans, complete, pending.rescore)

    def _remember_closed(self, trace_id: str, spans: tuple[Span, ...]) -> None:
        closed = self._closed
        closed[trace_id] = spans
        while len(closed) > self._closed_size:
            evicted, _ = closed.popitem(last=False)
            self._recently_evicted[evicted] = None
            if len(self._recently_evicted) > self._closed_size * 4:
                self._recently_evicted.popitem(last=False)

    def _count(self, event: str, count: int = 1) -> None:
        if self._observer is not None:
            self._observer.assembler_event(event, count)
