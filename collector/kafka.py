"""The Kafka publisher of ``vigil collector``: one record per trace on the ``otlp_spans`` topic.

Records are byte-compatible with the OpenTelemetry Collector's kafka exporter with
``partition_traces_by_id: true``: the value is a serialized ``ExportTraceServiceRequest``
(``otlp_proto``) holding the spans of exactly one trace, the key is the trace id as 32
lowercase hex characters, so every record of a trace lands on one partition.

Production is ``acks=all`` and idempotent by default (kafka-python ≥ 2.1). Memory is
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

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from collector.errors import BackpressureError, SettingsError
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch
from collector.otlp import encode_batch

__all__ = [
    "COMPRESSIONS",
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


class KafkaPublisher:
    """A :class:`collector.stream.Publisher` that produces one Kafka record per trace.

    Thread-safe. :meth:`publish` never blocks on Kafka: it encodes, checks the byte budget
    and hands the records to the producer's I/O thread. Lifecycle: :meth:`start`,
    :meth:`flush`, :meth:`shutdown`.

    Args:
        config: bootstrap servers, topic, compression, budget.
        retry_after_s: the ``retry_after`` of :class:`BackpressureError`.
        metrics: the collector's metrics (refused spans) — optional.
        registry: where :class:`KafkaMetrics` are registered — optional.
        producer_factory: builds the producer from keyword options (default ``KafkaProducer``).
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        retry_after_s: float = 2.0,
        metrics: CollectorMetrics | None = None,
        registry: CollectorRegistry | None = None,
        producer_factory: Callable[..., Any] | None = None,
    ) -> None:
        check_compression(config.compression)
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
        if metrics is not None:
            metrics.refused.labels("kafka", "full")
            metrics.refused.labels("kafka", "unavailable")
            metrics.dropped.labels("kafka", "delivery_failed")
        if self._kmetrics is not None:
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
        """Connect in the background; publishes are refused until connected."""
        self._thread = threading.Thread(target=self._connect_loop, name="vigil-kafka-connect", daemon=True)
        self._thread.start()

    def ready(self) -> bool:
        """Whether the producer is connected and the publisher open (``/readyz``)."""
        return self._producer is not None and not self._closed.is_set()

    def publish(self, batches: Sequence[TraceBatch]) -> None:
        """Produce one record per batch, all or none of them.

        Raises:
            BackpressureError: not connected yet, or the records do not fit the byte budget;
                nothing was produced and the refused spans were counted as dropped.
        """
        if not batches:
            return
        producer = self._producer
        if producer is None or self._closed.is_set():
            self._refuse(batches, "unavailable")
        records = [(record_key(b.trace_id), encode_batch(b), len(b.spans)) for b in batches]
        size = sum(len(key) + len(value) for key, value, _ in records)
        with self._lock:
            if self._pending and self._pending + size > self._config.buffer_bytes:
                full = True
            else:
                full = False
                self._pending += size
        if full:
            self._refuse(batches, "full")
        self._send(producer, records, size)

    def check_room(self, size_hint: int = 0) -> None:
        """Refuse early when not connected, or when ``size_hint`` more bytes would overflow the budget.

        A publish re-encodes each trace as its own record (spans plus a copy of their resource),
        so a raw protobuf body's size is about what it would add to the budget. Refusing is
        always safe (503: nothing kept, the sender retries); the exact check stays in :meth:`publish`.

        Raises:
            BackpressureError: a publish would be refused now (nothing counted: spans unknown).
        """
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
        """Refuse new records, flush within ``timeout_s`` and close the producer."""
        self._closed.set()
        deadline = time.monotonic() + timeout_s
        flushed = self.flush(timeout_s)
        producer = self._producer
        if producer is not None:
            producer.close(timeout=max(0.0, deadline - time.monotonic()))
        return flushed

    def _send(self, producer: Any, records: list[tuple[bytes, bytes, int]], size: int) -> None:
        topic = self._config.topic
        sent = 0
        try:
            for key, value, spans in records:
                future = producer.send(topic, key=key, value=value)
                sent += 1
                nbytes = len(key) + len(value)
                future.add_callback(self._delivered, nbytes)
                future.add_errback(self._failed, nbytes, spans)
        except Exception as exc:  # any producer error: give back the budget and ask to retry
            unsent = sum(len(k) + len(v) for k, v, _ in records[sent:])
            with self._lock:
                self._pending -= unsent
            self._rate_limited_log("kafka_send_failed", error=repr(exc), records=len(records) - sent)
            # Records already sent will arrive; the retry duplicates their spans, which the
            # scorers merge on span id, so refusing the whole request loses nothing.
            if self._metrics is not None:
                self._metrics.refused.labels("kafka", "unavailable").inc(sum(n for _, _, n in records[sent:]))
            raise BackpressureError(self._retry_after) from exc

    def _delivered(self, nbytes: int, _metadata: object) -> None:
        with self._lock:
            self._pending -= nbytes
        if self._kmetrics is not None:
            self._kmetrics.sent.inc()

    def _failed(self, nbytes: int, spans: int, exc: BaseException) -> None:
        with self._lock:
            self._pending -= nbytes
        if self._kmetrics is not None:
            self._kmetrics.failures.inc()
        if self._metrics is not None:
            self._metrics.dropped.labels("kafka", "delivery_failed").inc(spans)
        self._rate_limited_log("kafka_delivery_failed", error=repr(exc), spans=spans)

    def _refuse(self, batches: Sequence[TraceBatch], reason: str) -> None:
        if self._metrics is not None:
            self._metrics.refused.labels("kafka", reason).inc(sum(len(b.spans) for b in batches))
        raise BackpressureError(self._retry_after)

    def _connect_loop(self) -> None:
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


def _kafka_producer(**options: Any) -> Any:
    from kafka import KafkaProducer

    return KafkaProducer(**options)
