"""The stream worker: source → assemble → normalise → score → decide → sink → metrics.

One worker thread owns one :class:`~scorers.assemble.Assembler`. Each tick it pulls
records from the source (the in-process stream, or a Kafka partition set later), releases
finished runs, scores them and writes them to the sink, a chunk of runs at a time (:func:`chunks`). When the sink
raises :class:`~collector.errors.BackpressureError` (database down) the worker stops
pulling, retries the same batch with exponential backoff and loses nothing; upstream the
bounded stream fills and the receivers answer 503.

Lifecycle: :meth:`start`, :meth:`shutdown` (drains the source and every in-flight run,
scores and writes them within the deadline), :meth:`run_once` for tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import structlog

from collector.errors import BackpressureError
from collector.lifecycle import name_os_thread
from collector.model import TraceBatch
from scorers.acks import AckTracker
from scorers.assemble import Assembler, ClosedTrace
from scorers.metrics import RunMetrics
from scorers.model import RunSink, ScoredRun, WriteOutcome
from scorers.pipeline import Pipeline

log = structlog.get_logger(__name__)

CHUNK_BYTES = 8 * 2**20
"""Estimated span bytes (:attr:`~scorers.assemble.ClosedTrace.size`) scored and written together at most."""


def chunks(closed: list[ClosedTrace], max_runs: int, max_bytes: int) -> list[list[ClosedTrace]]:
    """``closed`` cut in order into chunks of at most ``max_runs`` runs and, past their first run,
    ``max_bytes`` estimated bytes (a run larger than ``max_bytes`` is a chunk of its own)."""
    out: list[list[ClosedTrace]] = []
    chunk: list[ClosedTrace] = []
    held = 0
    for run in closed:
        if chunk and (len(chunk) >= max_runs or held + run.size > max_bytes):
            out.append(chunk)
            chunk, held = [], 0
        chunk.append(run)
        held += run.size
    if chunk:
        out.append(chunk)
    return out


class Source(Protocol):
    """Where records come from."""

    def get_many(self, max_items: int, timeout_s: float) -> list[TraceBatch]:
        """Up to ``max_items`` records, waiting at most ``timeout_s`` for the first."""
        ...


FeedbackLookup = Callable[[Sequence[str]], Mapping[str, Mapping[str, object]]]
"""``lookup(trace_ids) -> {trace_id: feedback summary}``: user feedback that arrived before the run
was scored, passed to the rules as ``feedback``. May raise :class:`BackpressureError`; the run is
then scored without it (the store joins late feedback itself)."""


class StreamWorker:
    """Runs the pipeline over a source.

    Args:
        source: the record source.
        assembler: the run assembler (owned by this worker).
        pipeline: normalise/score/decide.
        sink: the store.
        metrics: run metrics.
        tick_s: longest wait for records before checking run deadlines.
        max_records: records pulled per tick.
        wall_clock_ns: wall clock for flag latency (injected in tests).
        on_written: called with each written batch (tests, benchmarks).
        feedback: looks up user feedback for the runs about to be scored.
        acks: acknowledges spooled bodies once their runs are written (write-ahead spool).
    """

    def __init__(
        self,
        source: Source,
        assembler: Assembler,
        pipeline: Pipeline,
        sink: RunSink,
        metrics: RunMetrics,
        *,
        tick_s: float = 0.05,
        max_records: int = 512,
        wall_clock_ns: Callable[[], int] = time.time_ns,
        on_written: Callable[[Sequence[ScoredRun]], None] | None = None,
        feedback: FeedbackLookup | None = None,
        acks: AckTracker | None = None,
    ) -> None:
        self._source = source
        self._assembler = assembler
        self._pipeline = pipeline
        self._sink = sink
        self._metrics = metrics
        self._tick = tick_s
        self._max_records = max_records
        self._wall = wall_clock_ns
        self._on_written = on_written
        self._feedback = feedback
        self._acks = acks
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._healthy = True
        self._pending_forced: list[ClosedTrace] = []
        self.new_runs = 0
        """Runs this worker inserted into the index (what it counted in ``vigil_runs_total``)."""
        self.new_flags = 0
        """Review items this worker created (what it counted in ``vigil_flagged_runs_total``)."""
        metrics.bind_inflight(lambda: float(assembler.inflight))
        metrics.bind_late_age(assembler.late_window)

    @property
    def assembler(self) -> Assembler:
        """The worker's assembler (the state of a previous run is loaded into it before :meth:`start`)."""
        return self._assembler

    @property
    def healthy(self) -> bool:
        """False while the sink is failing (readiness)."""
        return self._healthy

    def start(self) -> None:
        """Start the worker thread."""
        self._thread = threading.Thread(target=self._loop, name="vigil-stream-worker", daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float = 30.0, *, save: Callable[[Assembler], object] | None = None) -> bool:
        """Stop pulling, then score and write every record and in-flight run within ``timeout_s``.

        Args:
            timeout_s: the drain deadline.
            save: when given, only runs whose root span ended are scored; ``save`` is then
                called with the assembler to keep the unfinished ones (and the late-span
                cache) for the next start (:func:`scorers.state.save_state`).

        Returns:
            True when everything was written before the deadline.
        """
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
            if self._thread.is_alive():
                return False
        while True:
            records = self._source.get_many(self._max_records, 0.0)
            if not records:
                break
            self._ingest(records)
        # Runs the loop closed but could not write (store down when the stop came), and runs
        # evicted by the last records ingested, are written with the others.
        drained = self._assembler.drain(finished_only=save is not None)
        if self._acks is not None:
            self._acks.closing(drained)
        closed = self._pending_forced + drained
        self._pending_forced = []
        unwritten = closed[self._write_all(closed, deadline) :]
        written = not unwritten
        if save is not None:
            if unwritten:  # the store stayed down: keep these runs as unfinished work
                back = [TraceBatch(c.trace_id, c.spans, 0, c.size) for c in unwritten]
                self._assembler.import_state(back, [], enforce=False)
            save(self._assembler)
            if self._acks is not None:  # everything not written is in the state file now
                self._acks.saved()
        return written

    def adopt(self, closed: Sequence[ClosedTrace]) -> None:
        """Runs closed before :meth:`start` (force-closed while the saved state was loaded): written
        by the first tick with the others."""
        self._pending_forced.extend(closed)

    def replay(self, records: Sequence[TraceBatch], timeout_s: float = 30.0) -> int:
        """Feed records read back from the spool at start-up (before :meth:`start`); returns runs written.

        They go through the assembler like live records; then every run whose root span has
        ended is scored and written now (idempotently) rather than after the quiet period, so a
        long replay never holds more than a segment's runs. Should the store refuse them within
        ``timeout_s``, the worker thread writes them once it runs.
        """
        self._ingest(list(records))
        closed = self._assembler.drain(finished_only=True)
        if not closed:
            return 0
        if self._acks is not None:
            self._acks.closing(closed)
        written = self._write_all(closed, time.monotonic() + timeout_s)
        self._pending_forced.extend(closed[written:])
        return written

    def run_once(self, timeout_s: float = 0.0) -> int:
        """One tick: pull, release due runs, score and write them. Returns runs written."""
        records = self._source.get_many(self._max_records, timeout_s)
        self._ingest(records)
        closed = self._assembler.due()
        if self._acks is not None and closed:
            self._acks.closing(closed)
        if self._pending_forced:
            closed = self._pending_forced + closed
            self._pending_forced = []
        if not closed:
            return 0
        written = self._write_all(closed, None)
        if written < len(closed):  # stopping while the store is down: the drain retries the rest
            self._pending_forced = closed[written:] + self._pending_forced
        return written

    def _ingest(self, records: list[TraceBatch]) -> None:
        acks = self._acks
        assembler = self._assembler
        for record in records:
            forced = assembler.add(record)
            if forced:
                if acks is not None:
                    acks.closing(forced)
                self._pending_forced.extend(forced)
            if acks is not None:
                acks.received(record, assembler.is_open(record.trace_id))

    def _loop(self) -> None:
        name_os_thread()
        while not self._stop.is_set():
            try:
                self.run_once(self._wait())
            except Exception:
                log.exception("worker_tick_failed")
                time.sleep(self._tick)

    def _wait(self) -> float:
        nxt = self._assembler.next_deadline()
        if nxt is None:
            return self._tick
        return max(0.0, min(self._tick, nxt - time.monotonic()))

    def _write_all(self, closed: list[ClosedTrace], deadline: float | None) -> int:
        """Score and write ``closed`` in chunks (:func:`chunks`); returns how many were written (a prefix).

        Runs due together can be many (every run of a large body closes after the same quiet
        period): scoring them one chunk at a time bounds what exists only while they are scored
        (normalised runs, scores, store rows) to one chunk, instead of all of them at once.
        """
        written = 0
        for chunk in chunks(closed, self._max_records, CHUNK_BYTES):
            if not self._write_chunk(chunk, deadline):
                break
            written += len(chunk)
        return written

    def _write_chunk(self, closed: list[ClosedTrace], deadline: float | None) -> bool:
        found = self._lookup_feedback(closed)
        scored = [self._pipeline.process(c, found.get(c.trace_id)) for c in closed]
        backoff = 0.1
        while True:
            try:
                started = time.perf_counter()
                outcomes = self._sink.write(scored)
                self._metrics.store_seconds.observe(time.perf_counter() - started)
                break
            except BackpressureError as exc:
                self._healthy = False
                self._metrics.store_errors.inc()
                log.warning("store_unavailable", runs=len(scored), retry_in=backoff, error=str(exc))
                if deadline is not None and time.monotonic() + backoff > deadline:
                    return False
                if deadline is None and self._stop.wait(backoff):
                    return False  # the loop is stopping: shutdown() takes these runs over
                if deadline is not None:
                    time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
        self._healthy = True
        if self._acks is not None:
            self._acks.written(closed)
        self._account(scored, outcomes)
        if self._on_written is not None:
            self._on_written(scored)
        return True

    def _lookup_feedback(self, closed: list[ClosedTrace]) -> Mapping[str, Mapping[str, object]]:
        if self._feedback is None:
            return {}
        try:
            return self._feedback([c.trace_id for c in closed])
        except BackpressureError as exc:
            log.warning("feedback_lookup_failed", runs=len(closed), error=str(exc))
            return {}

    def _account(self, scored: list[ScoredRun], outcomes: Sequence[WriteOutcome]) -> None:
        account(self._metrics, scored, outcomes, self._wall())
        self.new_runs += sum(1 for o in outcomes if o.new_run)
        self.new_flags += sum(1 for o in outcomes if o.new_flag)


def account(metrics: RunMetrics, scored: Sequence[ScoredRun], outcomes: Sequence[WriteOutcome], now_ns: int) -> None:
    """Count written runs in the run metrics, once per run: only runs new to the index.

    A run already in the index (re-delivered, re-scored) updates ``vigil_runs_rescored_total``
    at most; a flag counts only when the write created the review item.
    """
    m = metrics
    for run, outcome in zip(scored, outcomes, strict=True):
        if outcome.new_run:
            m.observe_run(run)
        elif run.rescored:
            m.rescored.inc()
        if outcome.new_flag:
            m.observe_flag(run)
            if run.run.end_ns:
                m.flag_latency.observe(max(0.0, (now_ns - run.run.end_ns) / 1e9))
