"""``vigil scorer``: a Kafka consumer group that assembles, scores and stores runs.

One thread owns a kafka-python ``KafkaConsumer`` subscribed to the OTLP topic in the
group ``vigil-scorers``. Each assigned partition has its own
:class:`~scorers.offsets.PartitionRuns` (assembler + commit bookkeeping): all records of a
trace share a partition when keyed by trace id. Records holding several traces (a stock
exporter without ``partition_traces_by_id``) are accepted: each trace is assembled in the
partition where it arrived. Scoring, the store and the run metrics are those of the
embedded pipeline.

Commit protocol (what makes "nothing lost, nothing counted twice" hold):

1. A polled record is decoded and its traces are added to the partition's assembler; the
   record's offset is remembered as the *first offset* of every trace in it that was not
   pending yet. An undecodable record is counted, logged with its coordinates and passed.
   A *mixed* record — several traces, or one trace under another key (a stock exporter
   without ``partition_traces_by_id``: the spans of one trace can then land in several
   partitions) — is re-published as keyed one-trace records (the collector's format) and
   passed once Kafka acknowledged them all; its traces are assembled where their keyed
   records land. If re-publishing fails, the partition is rewound to that record and
   nothing after it is taken this tick (retried on the next one).
2. Runs whose quiet period (or idle time) has passed are closed, normalised, scored and
   decided, and written to the store in one transaction per tick.
3. Only after the store's ``write`` returned (the runs are durable) are those runs
   released from their partition's bookkeeping.
4. A partition's safe offset is the smallest first offset of its runs still pending
   (in flight, or closed and not yet written), or the offset after its last record when
   none is. It is committed synchronously at most every ``commit_interval_s`` while there is
   progress and at shutdown, and asynchronously at revocation (5), only when it is ahead of
   this consumer's last commit. It therefore never passes the first record of a run that is
   not yet durably written.
5. On revocation the safe offsets of the revoked partitions are committed (asynchronously:
   kafka-python 3 runs rebalance callbacks on its I/O loop) and their state is set aside.
   A partition assigned back to this consumer in the same rebalance keeps its state,
   because kafka-python keeps its fetch position too; the state of every other revoked
   partition is dropped and its new owner re-reads from the committed offset (which was
   safe whenever it was committed). On SIGTERM the safe offsets of every partition are
   committed synchronously before the consumer leaves the group.
6. Re-delivered records rebuild runs that may already be stored. The store's writes are
   idempotent on the trace id and report whether a run or review item is new
   (:class:`~scorers.model.WriteOutcome`); only new ones are counted in the run and flag
   counters (:func:`scorers.worker.account`).
7. When the store is unavailable (:class:`~collector.errors.BackpressureError`), every
   assigned partition is paused, nothing is committed, the same runs are retried with
   exponential backoff while ``poll`` keeps the group membership alive, and the partitions
   resume once the write succeeded.

Memory pressure: the partitions' assemblers are built without a
:class:`~collector.budget.Pressure` — a consumer has no intake to refuse, and pausing partitions
for memory is not done. Past the in-flight caps they close runs whose root has ended early
(complete), then cut rootless runs idle for ``VIGIL_EVICT_IDLE_S``, then, as before issue 25,
the least recently fed rootless run even while it is still receiving spans
(``evicted_inflight`` / ``evicted_inflight_bytes``: :mod:`scorers.assemble`). Nothing is lost
for the commit protocol — a cut run is written (incomplete) before its offset passes — but such a
run is stored incomplete and its later spans re-score it as late spans.

Metrics (besides the run metrics): ``vigil_consumer_lag_records{partition}`` (high
watermark minus the next offset to read), ``vigil_runs_in_flight_partition{partition}``
(runs pending per partition), ``vigil_consumer_assigned_partitions``, ``vigil_consumer_records_total``,
``vigil_consumer_bad_records_total``, ``vigil_consumer_rekeyed_records_total`` (mixed
records re-published), ``vigil_consumer_rekey_errors_total``, ``vigil_consumer_commits_total``,
``vigil_consumer_rebalances_total`` and ``vigil_consumer_paused`` (1 while the store is
down). The ``partition`` label is bounded by the topic's partition count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from kafka import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from collector.errors import BackpressureError, DecodeError
from collector.kafka import ProducerConfig, record_key
from collector.lifecycle import name_os_thread
from collector.model import TraceBatch
from collector.otlp import decode_protobuf, encode_batch
from scorers.assemble import Assembler, ClosedTrace
from scorers.metrics import RunMetrics
from scorers.model import RunSink, ScoredRun
from scorers.offsets import PartitionRuns
from scorers.pipeline import Pipeline
from scorers.worker import FeedbackLookup, account

__all__ = ["ConsumerConfig", "ConsumerMetrics", "KafkaScorer", "Rekeyer"]

log = structlog.get_logger(__name__)

MAX_BACKOFF_S = 10.0
"""Longest wait between two store retries while the database is down."""


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """How to reach Kafka and consume.

    Attributes:
        bootstrap: ``host:port[,host:port…]``.
        topic: the OTLP topic.
        group_id: the consumer group.
        session_timeout_ms: group session timeout.
        max_poll_records: records per poll.
        commit_interval_s: longest time between commits while there is progress.
        extra: further ``KafkaConsumer`` options.
    """

    bootstrap: str
    topic: str = "otlp_spans"
    group_id: str = "vigil-scorers"
    session_timeout_ms: int = 10_000
    max_poll_records: int = 2000
    commit_interval_s: float = 1.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def consumer_options(self) -> dict[str, Any]:
        """The ``KafkaConsumer`` keyword arguments (offsets are committed by hand)."""
        return {
            "bootstrap_servers": self.bootstrap.split(","),
            "group_id": self.group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": max(500, self.session_timeout_ms // 5),
            "max_poll_records": self.max_poll_records,
            **self.extra,
        }


class ConsumerMetrics:
    """Consumer-side metrics; per-partition gauges are read at scrape time.

    Args:
        registry: where to register.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.records = Counter("vigil_consumer_records", "Kafka records consumed.", registry=r)
        self.bad_records = Counter(
            "vigil_consumer_bad_records", "Kafka records that could not be decoded (skipped).", registry=r
        )
        self.rejected_spans = Counter(
            "vigil_consumer_rejected_spans", "Spans of consumed records rejected by validation.", registry=r
        )
        self.commits = Counter("vigil_consumer_commits", "Offset commits.", registry=r)
        self.rekeyed = Counter(
            "vigil_consumer_rekeyed_records",
            "Records holding several traces or a foreign key, re-published as keyed one-trace records.",
            registry=r,
        )
        self.rekey_errors = Counter(
            "vigil_consumer_rekey_errors", "Failed re-publications (the record is retried).", registry=r
        )
        self.rebalances = Counter("vigil_consumer_rebalances", "Partition revocations and assignments.", registry=r)
        self.paused = Gauge("vigil_consumer_paused", "1 while consumption is paused (store down).", registry=r)
        self.partitions: _PartitionCollector = _PartitionCollector()
        registry.register(self.partitions)


class _PartitionCollector(Collector):
    """Exposes the latest per-partition snapshot taken by the consumer thread."""

    def __init__(self) -> None:
        self.snapshot: dict[int, tuple[int | None, int]] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily(
            "vigil_consumer_lag_records", "Records behind the high watermark, per partition.", labels=["partition"]
        )
        inflight = GaugeMetricFamily(
            "vigil_runs_in_flight_partition", "Runs not yet written, per assigned partition.", labels=["partition"]
        )
        snapshot = dict(self.snapshot)
        for partition, (behind, pending) in sorted(snapshot.items()):
            if behind is not None:
                lag.add_metric([str(partition)], behind)
            inflight.add_metric([str(partition)], pending)
        yield lag
        yield inflight
        yield GaugeMetricFamily(
            "vigil_consumer_assigned_partitions", "Partitions assigned to this scorer.", value=len(snapshot)
        )


class KafkaScorer:
    """The consumer loop of ``vigil scorer``. Lifecycle: :meth:`start`, :meth:`shutdown`.

    Args:
        config: Kafka settings.
        assembler_factory: builds one fresh assembler per assigned partition.
        pipeline: normalise/score/decide.
        sink: the store (idempotent on trace id).
        metrics: run metrics (the same as ``vigil run``).
        consumer_metrics: consumer metrics.
        consumer_factory: builds the consumer from keyword options (default ``KafkaConsumer``).
        wall_clock_ns: wall clock for flag latency.
        on_written: called with each durably written batch (benchmarks).
        tick_s: longest wait in ``poll``.
        rekey: publishes trace batches as keyed one-trace records and returns once Kafka
            acknowledged them (raises otherwise); ``None`` assembles mixed records in place.
        feedback: looks up user feedback that arrived before the runs were scored (the
            rules' ``feedback`` variable), once per tick, as the embedded stream worker does.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        assembler_factory: Callable[[], Assembler],
        pipeline: Pipeline,
        sink: RunSink,
        *,
        metrics: RunMetrics,
        consumer_metrics: ConsumerMetrics,
        consumer_factory: Callable[..., Any] | None = None,
        wall_clock_ns: Callable[[], int] = time.time_ns,
        on_written: Callable[[Sequence[ScoredRun]], None] | None = None,
        tick_s: float = 0.1,
        rekey: Callable[[Sequence[TraceBatch]], None] | None = None,
        feedback: FeedbackLookup | None = None,
    ) -> None:
        self._config = config
        self._new_assembler = assembler_factory
        self._pipeline = pipeline
        self._sink = sink
        self._metrics = metrics
        self._cm = consumer_metrics
        self._factory = consumer_factory
        self._wall = wall_clock_ns
        self._on_written = on_written
        self._tick_ms = int(tick_s * 1000)
        self._rekey = rekey
        self._feedback = feedback
        self._closed: list[tuple[Any, PartitionRuns, ClosedTrace]] = []
        self._consumer: Any = None
        self._parts: dict[Any, PartitionRuns] = {}
        self._limbo: dict[Any, PartitionRuns] = {}
        self._backlog: list[tuple[Any, PartitionRuns, ScoredRun]] = []
        self._retry_at = 0.0
        self._backoff = 0.1
        self._last_commit = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._healthy = True
        self._joined = False
        self._final_ok = False
        self.new_runs = 0
        """Runs this scorer inserted into the index (what it counted in ``vigil_runs_total``)."""
        self.new_flags = 0
        """Review items this scorer created (what it counted in ``vigil_flagged_runs_total``)."""
        metrics.bind_inflight(lambda: float(sum(p.assembler.inflight for p in list(self._parts.values()))))
        metrics.bind_late_age(self._late_age)

    def _late_age(self) -> float:
        """``vigil_late_cache_age_seconds``: the shortest window of the partitions' caches that keep a run."""
        windows = [w for part in list(self._parts.values()) if (w := part.assembler.late_window()) > 0]
        return min(windows, default=0.0)

    @property
    def healthy(self) -> bool:
        """False while the store is failing or the consumer is not running (readiness)."""
        return self._healthy and self._thread is not None and self._thread.is_alive()

    @property
    def joined(self) -> bool:
        """Whether the consumer has had partitions assigned at least once."""
        return self._joined

    def start(self) -> None:
        """Create the consumer, subscribe and start the consumer thread."""
        self._consumer = self._make_consumer()
        self._consumer.subscribe([self._config.topic], listener=_Listener(self))
        self._thread = threading.Thread(target=self._loop, name="vigil-kafka-scorer", daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Stop consuming, write what is closed, commit the safe offsets and leave the group.

        Runs still being assembled are not written: their records are above the committed
        offset, so the next owner of the partition re-reads them.

        Returns:
            True when the thread stopped and the final commit went through.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                return False
        return self._final_ok

    def run_once(self) -> int:
        """One tick: poll, assemble, write due runs, commit. Returns runs written."""
        polled = self._consumer.poll(timeout_ms=self._tick_ms, max_records=self._config.max_poll_records)
        for tp, records in polled.items():
            part = self._parts.get(tp)
            if part is not None:
                self._ingest(tp, part, records)
        written = self._write_due()
        self._maybe_commit(force=False)
        self._snapshot()
        return written

    # --- the loop -------------------------------------------------------------------

    def _loop(self) -> None:
        name_os_thread()
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("scorer_tick_failed")
                time.sleep(0.5)
        self._final_ok = self._finish()

    def _finish(self) -> bool:
        ok = True
        self._score_closed()
        if self._backlog:
            try:
                self._write_backlog()
            except BackpressureError:
                ok = False
        try:
            self._maybe_commit(force=True)
        except Exception as exc:  # noqa: BLE001 - report; the next owner re-reads from the last commit
            log.warning("final_commit_failed", error=repr(exc))
            ok = False
        self._parts.clear()
        close_rekey = getattr(self._rekey, "close", None)
        if callable(close_rekey):
            try:
                close_rekey()
            except Exception as exc:  # noqa: BLE001 - what it held was acknowledged before its records were passed
                log.warning("rekey_close_failed", error=repr(exc))
        try:
            self._consumer.close(autocommit=False)
        except Exception as exc:  # noqa: BLE001 - leaving the group is best effort at shutdown
            log.warning("consumer_close_failed", error=repr(exc))
        log.info("scorer_stopped", clean=ok, new_runs=self.new_runs, new_flags=self.new_flags)
        return ok

    def _ingest(self, tp: Any, part: PartitionRuns, records: Sequence[Any]) -> None:
        self._cm.records.inc(len(records))
        for record in records:
            try:
                result = decode_protobuf(record.value or b"")
            except DecodeError as exc:
                self._cm.bad_records.inc()
                log.warning(
                    "record_undecodable", topic=tp.topic, partition=tp.partition, offset=record.offset, error=str(exc)
                )
                part.skip(record.offset)
                continue
            if result.rejected:
                self._cm.rejected_spans.inc(result.rejected)
            if self._rekey is not None and _mixed(record.key, result.batches):
                try:
                    self._rekey(result.batches)
                except Exception as exc:  # noqa: BLE001 - Kafka errors of any kind: retry the record
                    self._cm.rekey_errors.inc()
                    log.warning("rekey_failed", partition=tp.partition, offset=record.offset, error=repr(exc))
                    self._consumer.seek(tp, record.offset)
                    return
                self._cm.rekeyed.inc()
                part.skip(record.offset)
                continue
            forced = part.add(record.offset, result.batches)
            self._closed.extend((tp, part, c) for c in forced)

    def _write_due(self) -> int:
        if self._retry_at and time.monotonic() < self._retry_at:
            self._pause_all()  # partitions assigned meanwhile must wait too
            return 0
        for tp, part in self._parts.items():
            self._closed.extend((tp, part, c) for c in part.close_due())
        self._score_closed()
        if not self._backlog:
            return 0
        try:
            return self._write_backlog()
        except BackpressureError as exc:
            self._store_down(exc)
            return 0

    def _score_closed(self) -> None:
        """Score the closed runs (with the feedback that arrived before them) into the backlog."""
        if not self._closed:
            return
        closed, self._closed = self._closed, []
        found: Mapping[str, Mapping[str, object]] = {}
        if self._feedback is not None:
            try:
                found = self._feedback([c.trace_id for _, _, c in closed])
            except BackpressureError as exc:  # scored without it; the store joins late feedback itself
                log.warning("feedback_lookup_failed", runs=len(closed), error=str(exc))
        self._backlog.extend((tp, part, self._pipeline.process(c, found.get(c.trace_id))) for tp, part, c in closed)

    def _write_backlog(self) -> int:
        batch = self._backlog
        runs = [scored for _, _, scored in batch]
        started = time.perf_counter()
        outcomes = self._sink.write(runs)
        self._metrics.store_seconds.observe(time.perf_counter() - started)
        self._backlog = []
        for _, part, scored in batch:
            part.written((scored.run.trace_id,))  # harmless on the state of a partition since revoked
        account(self._metrics, runs, outcomes, self._wall())
        self.new_runs += sum(1 for o in outcomes if o.new_run)
        self.new_flags += sum(1 for o in outcomes if o.new_flag)
        if self._on_written is not None:
            self._on_written(runs)
        self._store_up()
        return len(runs)

    def _store_down(self, exc: BackpressureError) -> None:
        self._healthy = False
        self._metrics.store_errors.inc()
        self._cm.paused.set(1)
        self._pause_all()
        wait = self._backoff
        log.warning("store_unavailable", runs=len(self._backlog), retry_in=wait, error=str(exc))
        self._retry_at = time.monotonic() + wait
        self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)

    def _store_up(self) -> None:
        if self._retry_at:
            log.info("store_available", resumed=len(self._parts))
            self._consumer.resume(*self._consumer.paused())
            self._cm.paused.set(0)
        self._retry_at = 0.0
        self._backoff = 0.1
        self._healthy = True

    def _pause_all(self) -> None:
        assigned = self._consumer.assignment()
        if assigned:
            self._consumer.pause(*assigned)

    # --- offsets and rebalances ----------------------------------------------------

    def _maybe_commit(self, *, force: bool, only: Sequence[Any] | None = None, blocking: bool = True) -> None:
        if self._retry_at and not force:
            return  # store down: commit nothing
        now = time.monotonic()
        if not force and now - self._last_commit < self._config.commit_interval_s:
            return
        self._last_commit = now
        offsets: dict[Any, Any] = {}
        parts: list[tuple[PartitionRuns, int]] = []
        for tp in only if only is not None else list(self._parts):
            part = self._parts.get(tp)
            offset = part.offset_to_commit() if part is not None else None
            if part is not None and offset is not None:
                offsets[tp] = _offset_and_metadata(offset)
                parts.append((part, offset))
        if not offsets:
            return
        if blocking:  # rebalance callbacks may run meanwhile: only the parts captured above are updated
            self._consumer.commit(offsets=offsets)
        else:
            self._consumer.commit_async(offsets=offsets)
        self._cm.commits.inc()
        for part, offset in parts:
            part.committed = offset

    def revoked(self, partitions: Sequence[Any]) -> None:
        """Rebalance callback (I/O thread): commit what is safe for ``partitions``, set their state aside."""
        self._cm.rebalances.inc()
        mine = [tp for tp in partitions if tp in self._parts]
        try:
            self._maybe_commit(force=True, only=mine, blocking=False)
        except Exception as exc:  # noqa: BLE001 - a failed commit only means more re-delivery
            log.warning("revocation_commit_failed", error=repr(exc))
        for tp in mine:
            self._limbo[tp] = self._parts.pop(tp)
            self._cm.partitions.snapshot.pop(tp.partition, None)

    def assigned(self, partitions: Sequence[Any]) -> None:
        """Rebalance callback (I/O thread): keep the state of partitions assigned back, start the others fresh."""
        self._cm.rebalances.inc()
        self._joined = True
        kept = []
        for tp in partitions:
            if tp in self._parts:
                continue
            part = self._limbo.pop(tp, None)
            if part is not None:
                kept.append(tp.partition)
            self._parts[tp] = part or PartitionRuns(self._new_assembler())
        for tp, part in self._limbo.items():
            log.info("partition_revoked", partition=tp.partition, dropped_runs=part.pending_runs)
        self._limbo.clear()
        self._backlog = [entry for entry in self._backlog if self._parts.get(entry[0]) is entry[1]]
        self._closed = [entry for entry in self._closed if self._parts.get(entry[0]) is entry[1]]
        log.info("partitions_assigned", partitions=sorted(tp.partition for tp in partitions), kept=sorted(kept))

    def _snapshot(self) -> None:
        snap: dict[int, tuple[int | None, int]] = {}
        for tp, part in self._parts.items():
            high = self._consumer.highwater(tp)
            behind = None
            if high is not None:
                behind = max(0, high - (part.next_offset if part.next_offset is not None else (part.committed or 0)))
            snap[tp.partition] = (behind, part.pending_runs)
        self._cm.partitions.snapshot = snap

    def _make_consumer(self) -> Any:
        if self._factory is not None:
            return self._factory(**self._config.consumer_options())
        from kafka import KafkaConsumer

        return KafkaConsumer(**self._config.consumer_options())


def _mixed(key: bytes | None, batches: Sequence[TraceBatch]) -> bool:
    """Whether a record must be re-keyed: several traces, or one trace under another key."""
    if not batches:
        return False
    return len(batches) > 1 or key != record_key(batches[0].trace_id)


class Rekeyer:
    """Re-publishes traces as keyed one-trace records (the collector's format), synchronously.

    Args:
        config: the producer settings (topic = the topic being consumed).
        producer_factory: builds the producer from keyword options (default ``KafkaProducer``).
        timeout_s: longest wait for Kafka's acknowledgement of one call.
    """

    def __init__(
        self, config: ProducerConfig, producer_factory: Callable[..., Any] | None = None, timeout_s: float = 10.0
    ) -> None:
        self._config = config
        self._factory = producer_factory
        self._timeout_s = timeout_s
        self._producer: Any = None

    def __call__(self, batches: Sequence[TraceBatch]) -> None:
        """Publish ``batches``; return once every record is acknowledged.

        Raises:
            Exception: the producer's error when a record was not acknowledged in time.
        """
        if self._producer is None:
            if self._factory is not None:
                self._producer = self._factory(**self._config.producer_options())
            else:
                from kafka import KafkaProducer

                self._producer = KafkaProducer(**self._config.producer_options())
        topic = self._config.topic
        futures = [self._producer.send(topic, key=record_key(b.trace_id), value=encode_batch(b)) for b in batches]
        self._producer.flush(self._timeout_s)
        for future in futures:
            future.get(timeout=0)  # raises the delivery error, if any

    def close(self) -> None:
        """Close the producer (flushing what is left)."""
        if self._producer is not None:
            self._producer.close(self._timeout_s)
            self._producer = None


def _offset_and_metadata(offset: int) -> Any:
    return OffsetAndMetadata(offset, "", -1)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Forwards kafka-python's rebalance callbacks (run inside ``poll``) to the scorer."""

    def __init__(self, scorer: KafkaScorer) -> None:
        self._scorer = scorer

    def on_partitions_revoked(self, revoked: Sequence[Any]) -> None:
        self._scorer.revoked(list(revoked))

    def on_partitions_assigned(self, assigned: Sequence[Any]) -> None:
        self._scorer.assigned(list(assigned))
