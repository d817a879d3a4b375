"""The Kafka publisher of ``vigil collector``: one record per trace on the ``otlp_spans`` topic.

Records are byte-compatible with the OpenTelemetry Collector's kafka exporter with
``partition_traces_by_id: true``: the value is a serialized ``ExportTraceServiceRequest``
(``otlp_proto``) holding the spans of exactly one trace, the key is the trace id as 32
lowercase hex characters, so every record of a trace lands on one partition.

Production is ``acks=all`` and idempotent by default (kafka-python ≥ 2.1). The receivers await
:meth:`KafkaPublisher.publish_body`, which returns only once Kafka acknowledged every record of
the request, so a 200 / ``OK`` means the spans are on the topic: a ``kill -9`` of the collector
loses nothing that was answered 200 (records handed to the producer but not acknowledged belong
to requests still unanswered, which the senders retry). Many requests wait side by side and share
the producer's batches (``linger_ms`` stays small). A request whose records are not acknowledged
within ``ack_timeout_s`` is answered 503 + Retry-After and counted in
``vigil_refused_total{stage="kafka",reason="ack_timeout"}`` (its records may still arrive: the
retry then duplicates spans, which the scorers merge on span id).

With a spool (``VIGIL_KAFKA_SPOOL``, the write-ahead spool of :mod:`collector.spool`), a request
Kafka does not take (not connected, no acknowledgement in time, refused) is appended to the spool
instead and answered 200 once the spool's policy is met (``batch``: fsynced). From then on every
request goes to the spool, so that nothing overtakes what is there; a drain thread reads the spool
in order, produces its bodies and acknowledges them to the spool once Kafka acknowledged them, and
when it has caught up the requests go straight to Kafka again. At start-up a spool left by a
previous process is drained the same way. When the spool is at its byte budget the request is
answered 503 + Retry-After. Memory is
bounded by :attr:`KafkaPublisher.buffer_bytes`: the bytes of records handed to the producer
and not yet acknowledged. A publish that does not fit raises
:class:`~collector.errors.BackpressureError`, so the receivers answer 503 / ``UNAVAILABLE``
with Retry-After while Kafka is slow or down instead of growing memory. The producer is
created on a background thread (kafka-python blocks while it bootstraps), and until it is
connected every publish is refused the same way. Records that fail after the producer's
own retries (``delivery_timeout_ms``) are counted in ``vigil_kafka_delivery_failures_total``
and ``vigil_dropped_total{stage="kafka",reason="delivery_failed"}``: never silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from collector.errors import BackpressureError, DecodeError, SettingsError
from collector.lifecycle import name_os_thread
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch
from collector.otlp import decode_json, decode_protobuf, encode_batch
from collector.spool import ReadCursor, Spool, SpoolRecord

__all__ = [
    "COMPRESSIONS",
    "DEFAULT_ACK_TIMEOUT_S",
    "DEFAULT_BUFFER_BYTES",
    "DEFAULT_TOPIC",
    "KafkaMetrics",
    "KafkaPublisher",
    "ProducerConfig",
    "check_compression",
    "record_key",
]

log = structlog.get_logger(__name__)

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
"""Values of ``VIGIL_KAFKA_COMPRESSION`` (``none`` = uncompressed)."""

DEFAULT_TOPIC = "otlp_spans"
"""The topic of OTLP trace records (the default of ``VIGIL_KAFKA_TOPIC``)."""

DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024
"""Record bytes a publisher holds unacknowledged (the default of ``VIGIL_KAFKA_BUFFER_BYTES``)."""

DEFAULT_ACK_TIMEOUT_S = 5.0
"""How long a request waits for Kafka's acknowledgement before 503 (``VIGIL_KAFKA_ACK_TIMEOUT_S``).

Below the OTLP exporters' default request timeout (10 s), so that the sender gets a 503 with
Retry-After rather than timing out on its own."""

_CONNECT_RETRY_S = 2.0
_LOG_INTERVAL_S = 10.0


_CODEC_PACKAGES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}


def check_compression(compression: str) -> None:
    """Refuse a compression whose codec library is not installed (at start-up, not at the first send).

    Raises:
        SettingsError: naming ``kafka_compression`` and the package to install.
    """
    if compression not in COMPRESSIONS:
        raise SettingsError(
            "kafka_compression", "VIGIL_KAFKA_COMPRESSION", f"must be one of {', '.join(COMPRESSIONS)}", compression
        )
    package = _CODEC_PACKAGES.get(compression)
    if package is None:
        return
    import kafka.codec

    if not getattr(kafka.codec, f"has_{compression}")():
        reason = f"needs the {package} package: pip install {package}"
        raise SettingsError("kafka_compression", "VIGIL_KAFKA_COMPRESSION", reason, compression)


def record_key(trace_id: str) -> bytes:
    """The record key of a trace: its id as lowercase hex, as the otelcol kafka exporter writes it."""
    return trace_id.lower().encode("ascii")


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """How to reach Kafka and produce.

    Attributes:
        bootstrap: ``host:port[,host:port…]``.
        topic: the topic records go to.
        compression: one of :data:`COMPRESSIONS`.
        idempotent: idempotent production (needs ``acks=all``, which is always used).
        buffer_bytes: most record bytes in the producer, not yet acknowledged.
        linger_ms: how long the producer waits to fill a batch.
        delivery_timeout_ms: how long a record may take, retries included, before it fails.
        extra: further ``KafkaProducer`` options (tests, security settings).
    """

    bootstrap: str
    topic: str = DEFAULT_TOPIC
    compression: str = "none"
    idempotent: bool = True
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    linger_ms: int = 5
    delivery_timeout_ms: int = 120_000
    extra: Mapping[str, Any] = field(default_factory=dict)

    def producer_options(self) -> dict[str, Any]:
        """The ``KafkaProducer`` keyword arguments."""
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}, got {self.compression!r}")
        return {
            "bootstrap_servers": self.bootstrap.split(","),
            "acks": "all",
            "enable_idempotence": self.idempotent,
            "compression_type": None if self.compression == "none" else self.compression,
            "linger_ms": self.linger_ms,
            "delivery_timeout_ms": self.delivery_timeout_ms,
            # kafka-python 3 has no buffer_memory bound: our byte budget is what bounds memory.
            "batch_size": 256 * 1024,
            "bootstrap_timeout_ms": 5000,
            "max_request_size": max(1_048_576, min(self.buffer_bytes, 16 * 1024 * 1024)),
            "max_block_ms": 1000,
            **self.extra,
        }


class KafkaMetrics:
    """Producer-side metrics on one registry.

    Metrics:
        ``vigil_kafka_records_sent_total``: records acknowledged by Kafka.
        ``vigil_kafka_delivery_failures_total``: records that failed after the producer's retries.
        ``vigil_kafka_buffer_bytes`` / ``vigil_kafka_buffer_capacity_bytes``: unacknowledged
            record bytes and their bound (read at scrape time).
        ``vigil_kafka_connected``: 1 once the producer has bootstrapped.
        ``vigil_kafka_spooling``: 1 while requests go to the spool.
        ``vigil_kafka_spool_drained_total``: spooled bodies produced and acknowledged.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.sent = Counter("vigil_kafka_records_sent", "Records acknowledged by Kafka.", registry=r)
        self.failures = Counter(
            "vigil_kafka_delivery_failures", "Records that failed after the producer's retries.", registry=r
        )
        self.buffer = Gauge("vigil_kafka_buffer_bytes", "Record bytes sent but not yet acknowledged.", registry=r)
        self.capacity = Gauge("vigil_kafka_buffer_capacity_bytes", "Bound of vigil_kafka_buffer_bytes.", registry=r)
        self.connected = Gauge("vigil_kafka_connected", "1 once the producer has bootstrapped.", registry=r)
        self.spooling = Gauge(
            "vigil_kafka_spooling",
            "1 while requests go to the spool (Kafka unreachable or the spool draining).",
            registry=r,
        )
        self.drained = Counter(
            "vigil_kafka_spool_drained", "Spooled bodies produced to Kafka and acknowledged.", registry=r
        )


class KafkaPublisher:
    """A :class:`collector.stream.Publisher` that produces one Kafka record per trace.

    Thread-safe. :meth:`publish` never blocks on Kafka: it encodes, checks the byte budget
    and hands the records to the producer's I/O thread. :meth:`publish_body` (what the
    receivers await) does the same, then waits, without blocking the event loop, until Kafka
    acknowledged every record. Lifecycle: :meth:`start`, :meth:`flush`, :meth:`shutdown`.

    Args:
        config: bootstrap servers, topic, compression, budget.
        retry_after_s: the ``retry_after`` of :class:`BackpressureError`.
        ack_timeout_s: how long :meth:`publish_body` waits for the acknowledgements.
        spool: where requests go while Kafka does not take them (not opened: :meth:`start` opens it,
            :meth:`shutdown` closes it); None: they are refused (503) instead.
        metrics: the collector's metrics (refused spans) — optional.
        registry: where :class:`KafkaMetrics` are registered — optional.
        producer_factory: builds the producer from keyword options (default ``KafkaProducer``).
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        retry_after_s: float = 2.0,
        ack_timeout_s: float = DEFAULT_ACK_TIMEOUT_S,
        metrics: CollectorMetrics | None = None,
        registry: CollectorRegistry | None = None,
        producer_factory: Callable[..., Any] | None = None,
        spool: Spool | None = None,
    ) -> None:
        check_compression(config.compression)
        if ack_timeout_s <= 0:
            raise ValueError(f"ack_timeout_s must be positive, got {ack_timeout_s}")
        self._ack_timeout = ack_timeout_s
        self._options = config.producer_options()
        self._config = config
        self._retry_after = retry_after_s
        self._metrics = metrics
        self._kmetrics = KafkaMetrics(registry) if registry is not None else None
        self._factory = producer_factory
        self._producer: Any = None
        self._pending = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_log = 0.0
        self._spool = spool
        self._spooling = False
        self._mode = threading.Lock()  # spooling on/off, and appends while it is on
        self._drain_wake = threading.Event()
        self._drainer: threading.Thread | None = None
        if metrics is not None:
            metrics.refused.labels("kafka", "full")
            metrics.refused.labels("kafka", "unavailable")
            metrics.refused.labels("kafka", "ack_timeout")
            metrics.refused.labels("kafka", "delivery_failed")
            metrics.dropped.labels("kafka", "delivery_failed")
            if spool is not None:
                metrics.refused.labels("spool", "full")
                metrics.dropped.labels("spool", "undecodable")
        if self._kmetrics is not None:
            self._kmetrics.spooling.set_function(lambda: float(self._spooling))
            self._kmetrics.buffer.set_function(lambda: float(self._pending))
            self._kmetrics.capacity.set(config.buffer_bytes)

    @property
    def buffer_bytes(self) -> int:
        """The bound on unacknowledged record bytes."""
        return self._config.buffer_bytes

    @property
    def pending_bytes(self) -> int:
        """Record bytes handed to the producer and not yet acknowledged or failed."""
        return self._pending

    def start(self) -> None:
        """Open the spool (draining what a previous process left), connect in the background.

        Without a spool, publishes are refused until connected; with one, they are spooled.

        Raises:
            SpoolError: the spool directory is in use by another process or cannot be created.
        """
        if self._spool is not None:
            self._spool.open()  # what it holds is read back by the drain, not replayed here
            self._spooling = self._spool.unacked > 0
            self._drainer = threading.Thread(target=self._drain_loop, name="vigil-kafka-spool", daemon=True)
            self._drainer.start()
        self._thread = threading.Thread(target=self._connect_loop, name="vigil-kafka-connect", daemon=True)
        self._thread.start()

    def ready(self) -> bool:
        """Whether requests are taken (``/readyz``): the producer is connected, or a spool holds them."""
        if self._closed.is_set():
            return False
        return self._producer is not None or self._spool is not None

    def publish(self, batches: Sequence[TraceBatch]) -> None:
        """Produce one record per batch, all or none of them, without waiting for Kafka.

        A record that then fails is counted as dropped: its request was already answered.

        Raises:
            BackpressureError: not connected yet, or the records do not fit the byte budget;
                nothing was produced and the refused spans were counted.
        """
        if batches:
            self._produce(batches, None, count=True)

    async def publish_body(self, batches: Sequence[TraceBatch], body: bytes, encoding: str) -> None:
        """Produce one record per batch and return once Kafka acknowledged every one (``acks=all``).

        The receivers await this before they answer 200. ``body`` and ``encoding`` are not used
        (the records are re-encoded per trace) unless a spool is configured: then a request Kafka
        does not take is spooled instead (see the module doc). Waiting costs no thread: the
        producer's I/O thread settles one asyncio future per request when its last record is
        acknowledged.

        Raises:
            BackpressureError: nothing was produced (not connected, budget full), a record failed,
                or the acknowledgements did not come within ``ack_timeout_s`` (and there is no
                spool, or it is full): the request is to be answered 503 + Retry-After; the refused
                spans were counted (``vigil_refused_total{stage="kafka"|"spool"}``).
        """
        if not batches:
            return
        if self._spool is None:
            await self._produce_acked(batches, count=True)
            return
        if await self._to_spool(batches, body, encoding, only_if_spooling=True):
            return
        try:
            await self._produce_acked(batches, count=False)
        except BackpressureError as exc:
            self._rate_limited_log("kafka_spooling", reason=str(exc))
            await self._to_spool(batches, body, encoding, only_if_spooling=False)

    async def _produce_acked(self, batches: Sequence[TraceBatch], *, count: bool) -> None:
        waiter = _Acks(asyncio.get_running_loop(), len(batches))
        self._produce(batches, waiter, count=count)
        try:
            error = await asyncio.wait_for(waiter.future, self._ack_timeout)
        except TimeoutError:
            waiter.abandon()
            if count:
                self._count_refused("ack_timeout", sum(len(b.spans) for b in batches))
                self._rate_limited_log("kafka_ack_timeout", timeout_s=self._ack_timeout)
            raise BackpressureError(
                self._retry_after, f"Kafka did not acknowledge within {self._ack_timeout:g} s"
            ) from None
        if error is not None:
            if count:
                self._count_refused("delivery_failed", sum(len(b.spans) for b in batches))
            raise BackpressureError(self._retry_after, f"Kafka did not take the records: {error!r}")

    async def _to_spool(
        self, batches: Sequence[TraceBatch], body: bytes, encoding: str, *, only_if_spooling: bool
    ) -> bool:
        """Append ``body`` to the spool and wait for its policy; False (nothing done) when not spooling
        and ``only_if_spooling``. Appends and the switch happen under one lock, so the drain cannot
        declare the spool empty between them.

        Raises:
            BackpressureError: the spool is full (counted) or its write failed.
        """
        spool = self._spool
        assert spool is not None
        try:
            with self._mode:
                if not self._spooling:
                    if only_if_spooling:
                        return False
                    self._spooling = True
                    log.warning("kafka_spool_on", bootstrap=self._config.bootstrap)
                seq, future = spool.append(body, encoding)
        except BackpressureError:
            self._count_refused("full", sum(len(b.spans) for b in batches), stage="spool")
            raise
        self._drain_wake.set()
        await spool.committed(seq, future)
        return True

    def _produce(self, batches: Sequence[TraceBatch], waiter: _Acks | None, *, count: bool) -> None:
        producer = self._producer
        if producer is None or self._closed.is_set():
            self._refuse(batches, "unavailable", count)
        records = [(record_key(b.trace_id), encode_batch(b), len(b.spans)) for b in batches]
        size = sum(len(key) + len(value) for key, value, _ in records)
        with self._lock:
            if self._pending and self._pending + size > self._config.buffer_bytes:
                full = True
            else:
                full = False
                self._pending += size
        if full:
            self._refuse(batches, "full", count)
        self._send(producer, records, waiter, count=count)

    def check_room(self, size_hint: int = 0) -> None:
        """Refuse early when not connected, or when ``size_hint`` more bytes would overflow the budget.

        A publish re-encodes each trace as its own record (spans plus a copy of their resource),
        so a raw protobuf body's size is about what it would add to the budget. Refusing is
        always safe (503: nothing kept, the sender retries); the exact check stays in :meth:`publish`.

        Raises:
            BackpressureError: a publish would be refused now (nothing counted: spans unknown).
        """
        if self._spool is not None and (self._spooling or self._producer is None):
            self._spool.check_room(size_hint)
            return
        if self._producer is None or self._closed.is_set():
            raise BackpressureError(self._retry_after)
        pending = self._pending
        if pending and pending + max(1, size_hint) > self._config.buffer_bytes:
            raise BackpressureError(self._retry_after)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every record was acknowledged or failed; True when nothing is pending."""
        producer = self._producer
        if producer is not None:
            try:
                producer.flush(timeout=timeout_s)
            except Exception as exc:  # noqa: BLE001 - kafka-python raises its own timeout types; report, don't crash
                log.warning("kafka_flush_failed", error=repr(exc))
        return self._pending == 0

    def shutdown(self, timeout_s: float = 10.0) -> bool:
        """Refuse new records, flush within ``timeout_s`` and close the producer (and the spool: what
        it still holds stays on disk for the next start)."""
        self._closed.set()
        self._drain_wake.set()
        deadline = time.monotonic() + timeout_s
        flushed = self.flush(timeout_s)
        if self._drainer is not None:
            self._drainer.join(max(0.0, deadline - time.monotonic()))
        producer = self._producer
        if producer is not None:
            producer.close(timeout=max(0.0, deadline - time.monotonic()))
        if self._spool is not None:
            self._spool.close()
        return flushed

    # --- the spool's drain -------------------------------------------------------------------

    def _drain_loop(self) -> None:
        """Produce the spool's bodies in order; acknowledge each to the spool once Kafka acknowledged it."""
        name_os_thread()
        spool = self._spool
        assert spool is not None
        cursor: ReadCursor | None = None
        seq: int | None = None
        while not self._closed.is_set():
            if not self._spooling or self._producer is None:
                self._drain_wake.wait(0.5)
                self._drain_wake.clear()
                continue
            if seq is None:
                seq, cursor = spool.first_unacked(), None
                if seq is None:
                    self._stop_spooling_if_empty(spool)
                    continue
            read = spool.read(seq, cursor)
            if not read.records:
                if read.cursor is None:  # not an unacknowledged body (yet): start again from the oldest
                    seq = None
                self._stop_spooling_if_empty(spool)
                self._drain_wake.wait(0.05)
                self._drain_wake.clear()
                continue
            if self._drain_round(read.records):
                spool.ack([r.seq for r in read.records])
                if self._kmetrics is not None:
                    self._kmetrics.drained.inc(len(read.records))
                seq, cursor = read.records[-1].seq + 1, read.cursor
            else:
                self._closed.wait(min(self._retry_after, _CONNECT_RETRY_S))

    def _stop_spooling_if_empty(self, spool: Spool) -> None:
        with self._mode:
            if self._spooling and spool.unacked == 0:
                self._spooling = False
                log.info("kafka_spool_off", bootstrap=self._config.bootstrap)

    def _drain_round(self, bodies: Sequence[SpoolRecord]) -> bool:
        """Produce the records of ``bodies`` and wait for Kafka; True when every one was acknowledged."""
        records: list[tuple[bytes, bytes, int]] = []
        for body in bodies:
            try:
                decoded = (decode_json if body.encoding == "json" else decode_protobuf)(body.body)
            except DecodeError as exc:  # it was decoded once before it was spooled: a damaged body
                log.error("kafka_spool_undecodable", seq=body.seq, error=str(exc))
                if self._metrics is not None:
                    self._metrics.dropped.labels("spool", "undecodable").inc()
                continue
            records.extend((record_key(b.trace_id), encode_batch(b), len(b.spans)) for b in decoded.batches)
        if not records:
            return True
        size = sum(len(k) + len(v) for k, v, _ in records)
        with self._lock:  # the byte budget holds for the drain too (a retried round re-sends its records)
            if self._pending and self._pending + size > self._config.buffer_bytes:
                return False
            self._pending += size
        waiter = _RoundAcks(len(records))
        try:
            self._send(self._producer, records, waiter, count=False)
        except BackpressureError:
            return False
        if not waiter.done.wait(self._ack_timeout) or waiter.error is not None:
            self._rate_limited_log("kafka_spool_drain_failed", error=repr(waiter.error), bodies=len(bodies))
            return False
        return True

    def _send(
        self, producer: Any, records: list[tuple[bytes, bytes, int]], waiter: _Waiter | None, *, count: bool
    ) -> None:
        topic = self._config.topic
        sent = 0
        try:
            for key, value, spans in records:
                future = producer.send(topic, key=key, value=value)
                sent += 1
                nbytes = len(key) + len(value)
                future.add_callback(self._delivered, nbytes, waiter)
                future.add_errback(self._failed, nbytes, spans, waiter)
        except Exception as exc:  # any producer error: give back the budget and ask to retry
            unsent = sum(len(k) + len(v) for k, v, _ in records[sent:])
            with self._lock:
                self._pending -= unsent
            self._rate_limited_log("kafka_send_failed", error=repr(exc), records=len(records) - sent)
            # Records already sent will arrive; the retry duplicates their spans, which the
            # scorers merge on span id, so refusing the whole request loses nothing.
            if waiter is not None:
                waiter.abandon()
            if count:
                self._count_refused("unavailable", sum(n for _, _, n in records[sent:]))
            raise BackpressureError(self._retry_after) from exc

    def _delivered(self, nbytes: int, waiter: _Waiter | None, _metadata: object) -> None:
        with self._lock:
            self._pending -= nbytes
        if self._kmetrics is not None:
            self._kmetrics.sent.inc()
        if waiter is not None:
            waiter.settle(None)

    def _failed(self, nbytes: int, spans: int, waiter: _Waiter | None, exc: BaseException) -> None:
        with self._lock:
            self._pending -= nbytes
        if self._kmetrics is not None:
            self._kmetrics.failures.inc()
        if waiter is not None:  # its request is answered 503 (or was already): refused, not dropped
            waiter.settle(exc)
        elif self._metrics is not None:
            self._metrics.dropped.labels("kafka", "delivery_failed").inc(spans)
        self._rate_limited_log("kafka_delivery_failed", error=repr(exc), spans=spans)

    def _refuse(self, batches: Sequence[TraceBatch], reason: str, count: bool) -> None:
        if count:
            self._count_refused(reason, sum(len(b.spans) for b in batches))
        raise BackpressureError(self._retry_after)

    def _count_refused(self, reason: str, spans: int, stage: str = "kafka") -> None:
        if self._metrics is not None:
            self._metrics.refused.labels(stage, reason).inc(spans)

    def _connect_loop(self) -> None:
        name_os_thread()
        factory = self._factory or _kafka_producer
        while not self._closed.is_set():
            try:
                self._producer = factory(**self._options)
            except Exception as exc:  # noqa: BLE001 - bootstrap failures vary by client version; retry
                self._rate_limited_log("kafka_connect_failed", error=repr(exc), bootstrap=self._config.bootstrap)
                self._closed.wait(_CONNECT_RETRY_S)
                continue
            if self._kmetrics is not None:
                self._kmetrics.connected.set(1)
            log.info("kafka_producer_connected", bootstrap=self._config.bootstrap, topic=self._config.topic)
            return

    def _rate_limited_log(self, event: str, **fields: object) -> None:
        now = time.monotonic()
        if now - self._last_log >= _LOG_INTERVAL_S:
            self._last_log = now
            log.warning(event, **fields)


class _Acks:
    """The acknowledgements one request waits for: an asyncio future settled from the producer's thread.

    ``future`` gets None once all ``count`` records were acknowledged, or the first failure at
    once. It is settled with one ``call_soon_threadsafe`` per request, not one per record.
    """

    __slots__ = ("_left", "_lock", "_loop", "_settled", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop, count: int) -> None:
        self._loop = loop
        self._left = count
        self._lock = threading.Lock()
        self._settled = False
        self.future: asyncio.Future[BaseException | None] = loop.create_future()

    def settle(self, error: BaseException | None) -> None:
        """One record's outcome (None: acknowledged); any thread."""
        with self._lock:
            self._left -= 1
            if self._settled or (error is None and self._left > 0):
                return
            self._settled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._resolve, error)

    def abandon(self) -> None:
        """Nobody waits any more (timed out, or refused): later outcomes are ignored."""
        with self._lock:
            self._settled = True

    def _resolve(self, error: BaseException | None) -> None:
        if not self.future.done():
            self.future.set_result(error)


class _RoundAcks:
    """The acknowledgements the spool's drain waits for (on its own thread): ``done`` is set once all
    ``count`` records were acknowledged, or at the first failure (kept in ``error``)."""

    __slots__ = ("_left", "_lock", "done", "error")

    def __init__(self, count: int) -> None:
        self._left = count
        self._lock = threading.Lock()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def settle(self, error: BaseException | None) -> None:
        """One record's outcome (None: acknowledged); any thread."""
        with self._lock:
            self._left -= 1
            if error is not None and self.error is None:
                self.error = error
            finished = self._left <= 0 or error is not None
        if finished:
            self.done.set()

    def abandon(self) -> None:
        """Nothing to do: the drain retries the round."""


_Waiter = _Acks | _RoundAcks


def _kafka_producer(**options: Any) -> Any:
    from kafka import KafkaProducer

    return KafkaProducer(**options)
