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

The cache is bounded in bytes, so at a high rate it turns over fast (``vigil_late_cache_age_seconds``).
So it measures how late spans come: the *lateness* of a late span is how long after its run was
scored it came (a span dropped because its run was already forgotten counts as late as the cache was
long). While spans have come late in the last ``freeze_hold_s``, a run the byte budget would forget
that was scored within :data:`LATE_MARGIN` times the greatest such lateness is *frozen* instead
(``closed_frozen``): its spans are packed (:func:`freeze_spans`: ``marshal`` and Zstandard, ~1/8 of
their decoded size on content-heavy runs) and unpacked only if a late span comes for it. The same
budget then covers several times as long a lateness; the run count (``closed_cache_size``) caps only the
runs kept unpacked, packed ones are bounded by the bytes alone. A stream whose spans all come in time, or
within what the cache covers anyway, packs nothing and pays nothing for it.

Everything is bounded, in runs and in bytes (the records' memory estimates,
:func:`collector.budget.batch_bytes`): spans per run (extra spans dropped), the closed-run cache
(oldest forgotten) and the runs in flight. When the runs in flight pass either cap, the assembler
sheds, in this order, what costs least:

1. runs whose root has ended, due soonest first, are closed *now* rather than after their quiet
   period (``closed_early``): they are complete, and a span arriving later re-scores and updates
   the stored run, never duplicates it;
2. runs whose root has not ended and whose spans stopped coming — none for ``evict_idle_s`` —
   are force-closed as incomplete, least recently fed first (``evicted_idle``): the defence
   against a flood of traces whose root never comes;
3. with a :class:`~collector.budget.Pressure` (``vigil run``: shared with the in-process stream),
   nothing more is closed: the pressure is raised (``pressure_raised``) and the intake refuses new
   bodies with 503 / ``UNAVAILABLE`` + Retry-After until the runs in flight are back within their
   caps (runs close as their roots arrive, or go idle); :meth:`due` lowers it. A run still
   receiving spans is never cut, so every accepted run is scored whole. Without one (the Kafka
   consumer, which cannot refuse anything), the least recently fed run whose root has not ended is
   force-closed as incomplete (``evicted_inflight`` for the run cap, ``evicted_inflight_bytes``
   for the byte budget), as before.

A run the intake refused spans of, after decoding them (a :class:`~collector.owed.OwedSpans`
ledger, ``vigil run``), is *owed* them: its sender will retry them, possibly after the run's root
arrived on another connection. While owed, it is not closed at its deadline unless the runs in
flight are over their caps, it is closed early only after every run not owed, and once closed it
is *pinned* in the closed-run cache: forgotten to make room only after every run not pinned
(``pinned_evicted``). The spans arriving strike it off the ledger; the ledger gives up after its
horizon (:mod:`collector.owed`).

The run just fed is never the one closed for it (it would reopen at its next span). The clock is
injected so tests never sleep. Not thread-safe: one assembler per worker (the pressure flag is
the one thing read from another thread).
"""

from __future__ import annotations

import heapq
import marshal
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import zstandard

from collector.budget import ByteAccount, Pressure, batch_bytes
from collector.model import Span, SpanEvent, SpanKind, StatusCode, TraceBatch, fast_constructor
from collector.owed import OwedSpans

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
DEFAULT_EVICT_IDLE_S = 10.0
"""Seconds without a span after which a run whose root has not ended may be force-closed when the
runs in flight are over their caps: twice an SDK's batch export delay (5 s), and longer than the
worker's usual pause between two pulls, so a run whose spans are still coming is not taken for
one whose spans stopped; short enough that a flood of traces whose root never comes holds the
intake back for about that long, within the senders' retries (an exporter retries a 503 for
longer)."""
DEFAULT_RESCORE_HOLD_MAX_S = 60.0
"""Longest a run reopened again by late spans waits, from its first late span, before it is re-scored
(module doc): about as long as an OTLP exporter keeps retrying a refused body."""
DEFAULT_FREEZE_HOLD_S = 60.0
"""Seconds a late span's lateness is remembered: the closed-run cache freezes runs (rather than
forgetting them) until this long after the last late span (module doc). A minute covers an OTLP
exporter's retries of a refused body (its backoff starts at 1 s and doubles)."""
LATE_MARGIN: Final = 2.0
"""A run is frozen rather than forgotten while it was scored within this many times the greatest
lateness seen (module doc)."""
FROZEN_OVERHEAD: Final = 320
"""Bytes a frozen run costs beyond its packed spans: its trace id (81), the bytes object (33), the entry's tuple,
time and size (116) and its slot in the ordered dict (~90)."""


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
        complete: False when closed by the idle timeout or force-closed for the in-flight caps
            before its root ended.
        rescore: True when the run was scored before and late spans reopened it.
        size: estimated bytes of its spans (:func:`collector.budget.batch_bytes`).
    """

    trace_id: str
    spans: tuple[Span, ...]
    complete: bool
    rescore: bool = False
    size: int = 0


_new_closed = fast_constructor(ClosedTrace)

_Kept = tuple[tuple[Span, ...], int, float]
"""A run in the closed-run cache: its spans, their estimated bytes, when it was remembered (monotonic)."""
_Frozen = tuple[bytes, int, float]
"""A frozen run in the closed-run cache: its packed spans (:func:`freeze_spans`), their estimated bytes
once unpacked, when it was remembered (monotonic). It holds ``len(packed) + FROZEN_OVERHEAD`` bytes."""

_new_span = fast_constructor(Span)
_new_event = fast_constructor(SpanEvent)
_KINDS: Final = {int(kind): kind for kind in SpanKind}
_CODES: Final = {int(code): code for code in StatusCode}


def freeze_spans(spans: Sequence[Span], compressor: zstandard.ZstdCompressor) -> bytes:
    """The spans of a run packed into one compressed blob (:func:`thaw_spans` gives them back, equal).

    ``marshal`` (the interpreter's own format for its plain types: attribute values are such types)
    rather than ``pickle``, which builds a frozen dataclass through Python-level ``__setstate__``: half
    the time both ways. Objects shared by the spans (a resource's attributes) stay shared.

    Raises:
        ValueError: a value ``marshal`` cannot pack (an attribute mapping of another type).
    """
    rows = []
    for s in spans:
        events = [(e.name, e.time_ns, e.attributes) for e in s.events] if s.events else 0
        rows.append((s.trace_id, s.span_id, s.parent_span_id, s.name, int(s.kind), s.start_ns, s.end_ns,
                     int(s.status_code), s.status_message, s.attributes, events, s.resource, s.scope))  # fmt: skip
    # python-zstandard's compress() leaves its output the size of the compression bound (~the input's)
    # and only shortens what len() shows: copied, a kept blob holds its own length (BENCHMARKS.md, session 16)
    return bytes(memoryview(compressor.compress(marshal.dumps(rows))))


def thaw_spans(blob: bytes) -> tuple[Span, ...]:
    """The spans :func:`freeze_spans` packed (a blob this process made: ``marshal`` is not for foreign bytes)."""
    kinds, codes = _KINDS, _CODES
    spans = []
    for row in marshal.loads(zstandard.ZstdDecompressor().decompress(blob)):
        trace_id, span_id, parent, name, kind, start, end, code, message, attributes, events, resource, scope = row
        spans.append(_new_span(trace_id, span_id, parent, name, kinds.get(kind, kind), start, end,
                               codes.get(code, code), message, attributes,
                               tuple(_new_event(*e) for e in events) if events else (), resource, scope))  # fmt: skip
    return tuple(spans)


@dataclass(slots=True)
class _Pending:
    spans: dict[str, Span]
    last_seen: float
    root_ended: bool = False
    rescore: bool = False
    deadline: float = 0.0
    size: int = 0
    held: bool = False  # kept past its deadline for spans it is owed (counted once)
    reopens: int = 0  # how many times late spans reopened this run (module doc)
    opened_at: float = 0.0  # when late spans last reopened it


class Assembler:
    """Groups spans into runs and releases finished runs.

    Args:
        quiet_period_s: quiet time after the root ended before the run closes.
        max_idle_s: idle time after which a run closes as incomplete.
        max_inflight: cap on runs being assembled; past it runs are shed (module doc).
        max_spans_per_run: spans beyond this per run are dropped and counted.
        closed_cache_size: closed runs kept to merge late spans into.
        clock: monotonic seconds (injected in tests).
        observer: receives counted events: ``spans_dropped_cap``, ``closed_early`` (a complete run
            closed before its quiet period for the in-flight caps), ``evicted_idle`` (a rootless
            run whose spans stopped coming, force-closed for the caps), ``pressure_raised`` (the
            intake asked to refuse), ``evicted_inflight`` (run cap) and ``evicted_inflight_bytes``
            (byte budget) (a rootless run force-closed, only without ``pressure``), ``late_spans``,
            ``late_evicted``, ``duplicate_spans``, ``closed_cache_evicted`` (a closed run
            forgotten, by count or bytes), ``pinned_evicted`` (a closed run still owed spans
            forgotten, when only such runs were left to forget), ``held_owed`` (a run owed spans
            kept in flight past its deadline), ``closed_frozen`` (a closed run packed to keep it longer).
        inflight_bytes: byte budget of the runs being assembled; 0: unbounded. An int, or a
            :class:`~collector.budget.ByteAccount` shared by several assemblers (one per Kafka
            partition), which then hold that budget together.
        closed_cache_bytes: byte budget of the closed-run cache; 0: unbounded (same sharing).
        evict_idle_s: a rootless run fed nothing for this long may be force-closed for the caps.
        pressure: raised while the runs in flight stay over their caps; the intake refuses then
            instead of the assembler cutting runs still receiving spans. None: no intake to refuse
            (the Kafka consumer), such runs are force-closed (module doc).
        owed: the ledger of spans the intake refused after decoding; runs owed spans are kept
            (module doc). None: no such ledger (the Kafka consumer).
        freeze_hold_s: the closed-run cache freezes runs rather than forgetting them until this long
            after the last late span (module doc); 0: it never freezes.
        rescore_hold_max_s: the longest a run reopened again by late spans waits before it is
            re-scored (module doc); at or below the quiet period, every reopening waits only that.
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
        inflight_bytes: int | ByteAccount = 0,
        closed_cache_bytes: int | ByteAccount = 0,
        evict_idle_s: float = DEFAULT_EVICT_IDLE_S,
        pressure: Pressure | None = None,
        owed: OwedSpans | None = None,
        freeze_hold_s: float = DEFAULT_FREEZE_HOLD_S,
        rescore_hold_max_s: float = DEFAULT_RESCORE_HOLD_MAX_S,
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
        # closed runs: trace id -> (spans, estimated bytes, monotonic time it was remembered), oldest first
        self._closed: OrderedDict[str, _Kept] = OrderedDict()
        self._pinned: OrderedDict[str, _Kept] = OrderedDict()  # closed, still owed spans
        self._frozen: OrderedDict[str, _Frozen] = OrderedDict()  # closed and packed, oldest first
        self._freeze_hold = freeze_hold_s
        self._freeze_until = float("-inf")  # monotonic time until which the cache freezes rather than forgets
        self._lateness = 0.0  # the greatest lateness seen since spans started coming late (module doc)
        self._compressor: zstandard.ZstdCompressor | None = None
        self._owed = owed
        self._recently_evicted: OrderedDict[str, None] = OrderedDict()
        self._rescore_hold_max = max(quiet_period_s, rescore_hold_max_s)
        self._reopens: dict[str, int] = {}  # runs in flight or cached that late spans reopened: how often
        self._rootless: OrderedDict[str, None] = OrderedDict()  # in flight, root not ended: least recently fed first
        self._rooted: OrderedDict[str, None] = OrderedDict()  # in flight, root ended: due soonest first
        self._evict_idle = evict_idle_s
        self.pressure = pressure
        """Raised while the runs in flight stay over their caps (None: runs are force-closed instead)."""
        self.inflight_account = _account(inflight_bytes)
        """Estimated bytes of the runs being assembled (``vigil_memory_held_bytes{structure="inflight"}``)."""
        self.closed_account = _account(closed_cache_bytes)
        """Estimated bytes of the closed-run cache (``vigil_memory_held_bytes{structure="late"}``)."""

    @property
    def inflight(self) -> int:
        """Number of runs being assembled."""
        return len(self._pending)

    def is_open(self, trace_id: str) -> bool:
        """Whether ``trace_id`` is being assembled (it has spans and has not closed)."""
        return trace_id in self._pending

    def add(self, batch: TraceBatch, *, enforce: bool = True) -> list[ClosedTrace]:
        """Add one record's spans.

        Args:
            batch: the record.
            enforce: force-close runs past the in-flight caps (False only to take back runs that
                must not be lost, see :meth:`import_state`).

        Returns:
            Runs closed to respect the in-flight caps, in runs and bytes (usually empty): complete
            runs closed early, and runs force-closed as incomplete (module doc).
        """
        return self._add(batch, enforce, self.pressure is None)

    def _add(self, batch: TraceBatch, enforce: bool, force: bool) -> list[ClosedTrace]:
        """:meth:`add`; ``force``: cut rootless runs still being fed rather than raise the pressure."""
        now = self._clock()
        trace_id = batch.trace_id
        owed = self._owed
        if owed is not None and trace_id in owed:
            owed.arrived(trace_id, batch.spans)
        pending = self._pending.get(trace_id)
        if pending is None:
            pending = self._open(trace_id, batch, now)
            if pending is None:
                return []
            self._pending[trace_id] = pending
            self.inflight_account.held += pending.size
        self._merge(pending, batch.spans, batch.size or batch_bytes(batch))
        pending.last_seen = now
        self._schedule(trace_id, pending)
        if pending.root_ended:
            self._rootless.pop(trace_id, None)
            order = self._rooted
        else:
            order = self._rootless
        order[trace_id] = None
        order.move_to_end(trace_id)
        account = self.inflight_account
        if len(self._pending) > self._max_inflight or (account.budget and account.held > account.budget):
            return self._relieve(now, trace_id, force=force) if enforce else []
        pressure = self.pressure
        if pressure is not None and pressure.raised:
            pressure.raised = False
        return []

    def due(self) -> list[ClosedTrace]:
        """Pop every run whose deadline has passed, in deadline order; then, while the runs in flight
        are over their caps, shed what costs least (complete runs closed early, idle rootless runs
        force-closed: module doc, steps 1–2) and raise or lower the pressure.

        Called on every tick of the worker, also when nothing arrives: that is how the pressure
        comes down while the intake refuses.
        """
        now = self._clock()
        out: list[ClosedTrace] = []
        heap = self._heap
        owed = self._owed
        if owed is not None:
            owed.expire()
            self._unpin(owed)
        held: list[tuple[str, _Pending]] = []
        while heap and heap[0][0] <= now:
            deadline, trace_id = heapq.heappop(heap)
            pending = self._pending.get(trace_id)
            if pending is None or pending.deadline != deadline:
                continue  # stale heap entry: the run got newer spans
            if owed is not None and trace_id in owed and not self._over():
                held.append((trace_id, pending))  # its refused spans are coming back: wait for them
                continue
            out.append(self._close(trace_id, pending))
        for trace_id, pending in held:
            if not pending.held:
                pending.held = True
                self._count("held_owed")
            pending.deadline = now + self._quiet
            heapq.heappush(heap, (pending.deadline, trace_id))
        if self._over():
            out.extend(self._relieve(now, None, force=False))
        elif self.pressure is not None and self.pressure.raised:
            self.pressure.raised = False
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

    def export_state(self) -> tuple[list[TraceBatch], list[TraceBatch]]:
        """The spans of every in-flight run and of the cached closed runs, oldest first.

        Frozen runs are unpacked only as far as the cache's byte budget holds them unpacked, newest
        first (:meth:`import_state` would forget the rest): a cache of packed runs unpacked whole
        would hold several times its budget at a stop.

        Returns:
            ``(in_flight, closed)`` lists of one :class:`~collector.model.TraceBatch` per run
            (``size``: its estimated bytes).
        """
        in_flight = [TraceBatch(tid, tuple(p.spans.values()), 0, p.size) for tid, p in self._pending.items()]
        closed = [
            TraceBatch(tid, spans, 0, size)
            for cache in (self._closed, self._pinned)
            for tid, (spans, size, _) in cache.items()
        ]
        room = self.closed_account.budget - sum(b.size for b in closed) if self.closed_account.budget else None
        frozen: list[TraceBatch] = []
        for tid, (blob, size, _) in reversed(self._frozen.items()):
            if room is not None:
                if size > room:
                    break
                room -= size
            frozen.append(TraceBatch(tid, thaw_spans(blob), 0, size))
        frozen.reverse()
        return in_flight, frozen + closed

    def import_state(
        self, in_flight: Sequence[TraceBatch], closed: Sequence[TraceBatch], *, enforce: bool = True
    ) -> list[ClosedTrace]:
        """Restore what :meth:`export_state` returned (at start-up, before any span arrives).

        Closed runs go back into the late-span cache; in-flight runs resume with their idle
        and quiet clocks restarted now. Both stay within their caps, in runs and bytes (the state
        of a process with larger budgets may be loaded): the cache forgets its oldest runs, and
        in-flight runs past the caps are closed — those whose root ended early (complete), then
        the least recently fed others, cut even with a :attr:`pressure` (nothing feeds them yet,
        the intake need not refuse for them) — unless ``enforce`` is false (runs the store refused
        at a stop, taken back to be saved rather than lost).

        Returns:
            The runs force-closed to respect the in-flight caps (to be scored and written).
        """
        for batch in closed:
            self._remember_closed(batch.trace_id, batch.spans, batch_bytes(batch))
        forced: list[ClosedTrace] = []
        for batch in in_flight:
            entry = self._closed.pop(batch.trace_id, None) or self._pinned.pop(batch.trace_id, None)
            if entry is not None:  # taken back: in flight again, not a late span
                self.closed_account.sub(entry[1])
            packed = self._frozen.pop(batch.trace_id, None)
            if packed is not None:
                self.closed_account.sub(len(packed[0]) + FROZEN_OVERHEAD)
            self._recently_evicted.pop(batch.trace_id, None)
            forced.extend(self._add(batch, enforce, True))
        return forced

    def late_window(self) -> float:
        """Seconds since the run the closed-run cache forgets next was scored (0 when it keeps none):
        about how late a span may come after its run was scored and still be merged, the cache turning
        over faster as throughput grows (``vigil_late_cache_age_seconds``). Runs still owed refused spans
        are kept apart and not counted. Safe to call from another thread (a scrape)."""
        try:
            at = next(iter(self._frozen.values()))[2] if self._frozen else next(iter(self._closed.values()))[2]
        except (StopIteration, RuntimeError):  # empty, or changed by the worker meanwhile
            return 0.0
        return max(0.0, self._clock() - at)

    def next_deadline(self) -> float | None:
        """Monotonic time of the earliest pending deadline (may be stale), or None."""
        return self._heap[0][0] if self._heap else None

    def _open(self, trace_id: str, batch: TraceBatch, now: float) -> _Pending | None:
        entry = self._closed.pop(trace_id, None)
        if entry is None and self._pinned:
            entry = self._pinned.pop(trace_id, None)
        if entry is None and self._frozen:
            packed = self._frozen.pop(trace_id, None)
            if packed is not None:  # held as its packed size, then as any closed run's (subtracted below)
                self.closed_account.sub(len(packed[0]) + FROZEN_OVERHEAD - packed[1])
                entry = thaw_spans(packed[0]), packed[1], packed[2]
        if entry is None:
            if trace_id in self._recently_evicted:
                self._count("late_evicted", len(batch.spans))
                self._seen_late(now, self.late_window())  # later than the cache reached: at least that
                return None
            return _Pending(spans={}, last_seen=now)
        old, size, scored_at = entry
        self.closed_account.sub(size)
        known = {s.span_id for s in old}
        fresh = [s for s in batch.spans if s.span_id not in known]
        if not fresh:
            self._count("duplicate_spans", len(batch.spans))
            self._remember_closed(trace_id, old, size)
            return None
        self._count("late_spans", len(fresh))
        self._seen_late(now, now - scored_at)
        reopens = self._reopens[trace_id] = self._reopens.get(trace_id, 0) + 1
        pending = _Pending({s.span_id: s for s in old}, now, rescore=True, size=size, reopens=reopens, opened_at=now)
        pending.root_ended = any(s.parent_span_id is None and s.end_ns for s in old)
        return pending

    def _merge(self, pending: _Pending, spans: tuple[Span, ...], size: int) -> None:
        store = pending.spans
        dropped = 0
        added = 0
        for span in spans:
            previous = store.get(span.span_id)
            if previous is None:
                if len(store) >= self._max_spans:
                    dropped += 1
                    continue
                added += 1
            elif previous.end_ns and not span.end_ns:
                continue  # keep the ended version of a duplicated span
            store[span.span_id] = span
            if span.parent_span_id is None and span.end_ns:
                pending.root_ended = True
        if added:  # the new spans' share of the record's estimate (a replaced span keeps its count)
            grown = size * added // len(spans) if added < len(spans) else size
            pending.size += grown
            self.inflight_account.held += grown
        if dropped:
            self._count("spans_dropped_cap", dropped)

    def _schedule(self, trace_id: str, pending: _Pending) -> None:
        if not pending.root_ended:
            pending.deadline = pending.last_seen + self._idle
        elif pending.reopens > 1:  # reopened again: wait longer for the rest of its late spans (module doc)
            hold = min(self._quiet * 2 ** min(pending.reopens - 1, 32), self._rescore_hold_max)
            pending.deadline = max(pending.opened_at + hold, pending.last_seen + self._quiet)
        else:
            pending.deadline = pending.last_seen + self._quiet
        heapq.heappush(self._heap, (pending.deadline, trace_id))

    def _over(self) -> bool:
        """Whether the runs in flight exceed either cap (runs, bytes)."""
        return len(self._pending) > self._max_inflight or self.inflight_account.over()

    def _relieve(self, now: float, keep: str | None, *, force: bool) -> list[ClosedTrace]:
        """Shed runs in flight until they are within their caps (module doc, steps 1–3), never ``keep``
        (the run just fed); ``force``: cut the least recently fed rootless runs as a last resort.
        Raises or lowers :attr:`pressure`. Returns the runs closed."""
        out: list[ClosedTrace] = []
        pending = self._pending
        rooted = self._rooted
        owed = self._owed
        held: list[str] = []  # owed runs passed over, in order
        while rooted and self._over():  # 1. complete runs, due soonest first: closed early
            trace_id = next(iter(rooted))
            if trace_id == keep:  # the most recently fed: last in order
                break
            if owed is not None and trace_id in owed:  # closed only after every run not owed
                held.append(trace_id)
                rooted.move_to_end(trace_id)
                if len(held) >= len(rooted):
                    break
                continue
            self._count("closed_early")
            out.append(self._close(trace_id, pending[trace_id]))
        for trace_id in held:
            if trace_id in rooted and trace_id != keep and self._over():
                self._count("closed_early")
                out.append(self._close(trace_id, pending[trace_id]))
        for trace_id in reversed(held):  # back to their place, due soonest first
            if trace_id in rooted:
                rooted.move_to_end(trace_id, last=False)
        rootless = self._rootless
        idle_before = now - self._evict_idle
        while rootless and self._over():  # 2. rootless runs whose spans stopped coming
            trace_id = next(iter(rootless))
            run = pending[trace_id]
            if trace_id == keep or run.last_seen > idle_before:
                break
            self._count("evicted_idle")
            out.append(self._close(trace_id, run, forced=True))
        if force:  # 3. nobody to refuse: cut the least recently fed rootless runs
            event = "evicted_inflight" if len(pending) > self._max_inflight else "evicted_inflight_bytes"
            while rootless and self._over():
                trace_id = next(iter(rootless))
                if trace_id == keep:
                    break
                self._count(event)
                out.append(self._close(trace_id, pending[trace_id], forced=True))
        pressure = self.pressure
        if pressure is not None:
            over = self._over()
            if over and not pressure.raised:
                self._count("pressure_raised")
            pressure.raised = over
        return out

    def _close(self, trace_id: str, pending: _Pending, *, forced: bool = False) -> ClosedTrace:
        del self._pending[trace_id]
        if pending.root_ended:
            self._rooted.pop(trace_id, None)
        else:
            self._rootless.pop(trace_id, None)
        self.inflight_account.held -= pending.size
        spans = tuple(pending.spans.values())
        self._remember_closed(trace_id, spans, pending.size)
        complete = pending.root_ended and not forced
        return _new_closed(trace_id, spans, complete, pending.rescore, pending.size)

    def _remember_closed(self, trace_id: str, spans: tuple[Span, ...], size: int) -> None:
        closed = self._closed
        pinned = self._pinned
        frozen = self._frozen
        account = self.closed_account
        owed = self._owed
        now = self._clock()
        cap = self._closed_size
        (pinned if owed is not None and trace_id in owed else closed)[trace_id] = (spans, size, now)
        account.held += size
        # Packed runs (which exist only under a byte budget) are bounded by its bytes alone: the run count
        # caps the runs kept unpacked. Counted with them, a fast stream (600 heavy runs/s: 5,000 runs are
        # 8 s) forgot packed runs its bytes still had room for, and the late spans of a connection lagging
        # longer were dropped (BENCHMARKS.md, "session 21").
        if not self._crowded():
            return
        evicted = unpinned = 0
        if account.budget and now < self._freeze_until:  # spans come late: keep what they may come for
            oldest_kept = now - LATE_MARGIN * self._lateness
            while closed and self._crowded():  # scored longer ago than spans come late: forgotten
                first = next(iter(closed))
                if first == trace_id or closed[first][2] >= oldest_kept:
                    break
                evicted += self._forget_oldest()
            self._freeze(trace_id)
        # the oldest first, packed ones (the oldest) before any unpacked one: the cache keeps the newest runs
        while (closed or pinned or frozen) and (
            len(closed) + len(pinned) > cap or (account.over() and len(closed) + len(pinned) + len(frozen) > 1)
        ):
            if frozen or closed:
                evicted += self._forget_oldest()
            else:
                old, (_, old_size, _) = pinned.popitem(last=False)
                account.held -= old_size
                self._forgotten(old)
                unpinned += 1
        if evicted:
            self._count("closed_cache_evicted", evicted)
        if unpinned:
            self._count("pinned_evicted", unpinned)

    def _crowded(self) -> bool:
        """Whether the closed-run cache is over its bytes or holds more unpacked runs than its run count."""
        return self.closed_account.over() or len(self._closed) + len(self._pinned) > self._closed_size

    def _forget_oldest(self) -> int:
        """Forget the oldest run not owed spans (frozen runs are the oldest), or pin it if it turns out to
        be owed (refused after it closed: its retry is coming). Returns 1 if a run was forgotten."""
        frozen, closed, owed, account = self._frozen, self._closed, self._owed, self.closed_account
        if frozen:
            old, (blob, unpacked, at) = frozen.popitem(last=False)
            if owed is not None and old in owed:
                self._pinned[old] = (thaw_spans(blob), unpacked, at)
                account.held += unpacked - len(blob) - FROZEN_OVERHEAD
                return 0
            account.held -= len(blob) + FROZEN_OVERHEAD
        else:
            old, entry = closed.popitem(last=False)
            if owed is not None and old in owed:
                self._pinned[old] = entry
                return 0
            account.held -= entry[1]
        self._forgotten(old)
        return 1

    def _forgotten(self, trace_id: str) -> None:
        if self._reopens:
            self._reopens.pop(trace_id, None)
        recent = self._recently_evicted
        recent[trace_id] = None
        if len(recent) > max(self._closed_size, len(self._closed) + len(self._frozen)) * 4:
            recent.popitem(last=False)

    def _seen_late(self, now: float, lateness: float) -> None:
        """A span came ``lateness`` seconds after its run was scored (module doc)."""
        if now >= self._freeze_until:  # the first since the last hold ran out
            self._lateness = 0.0
        self._lateness = max(self._lateness, lateness)
        self._freeze_until = now + self._freeze_hold

    def _freeze(self, keep: str) -> None:
        """Pack the oldest closed runs (never ``keep``, the run just remembered) until the cache is back
        within its byte budget and its count of unpacked runs, or none is left to pack; a run that cannot
        be packed is left as it is."""
        closed = self._closed
        frozen = self._frozen
        account = self.closed_account
        compressor = self._compressor
        if compressor is None:
            compressor = self._compressor = zstandard.ZstdCompressor(level=1)
        packed = 0
        while closed and self._crowded():
            trace_id = next(iter(closed))
            if trace_id == keep:
                break
            spans, size, at = closed[trace_id]
            try:
                blob = freeze_spans(spans, compressor)
            except ValueError:  # not packable (an attribute mapping of another type): forgotten when due
                break
            del closed[trace_id]
            frozen[trace_id] = (blob, size, at)
            account.held += len(blob) + FROZEN_OVERHEAD - size
            packed += 1
        if packed:
            self._count("closed_frozen", packed)

    def _unpin(self, owed: OwedSpans) -> None:
        """Move the oldest pinned runs no longer owed spans back among the others (newest)."""
        pinned = self._pinned
        while pinned:
            trace_id = next(iter(pinned))
            if trace_id in owed:
                break
            self._closed[trace_id] = pinned.pop(trace_id)

    def _count(self, event: str, count: int = 1) -> None:
        if self._observer is not None:
            self._observer.assembler_event(event, count)


def _account(budget: int | ByteAccount) -> ByteAccount:
    return budget if isinstance(budget, ByteAccount) else ByteAccount(budget)
