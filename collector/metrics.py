"""Prometheus metrics of the collector role: OTLP requests, spans in, spans rejected, drops.

Every metric is registered on the injected registry (never the global default one).
Label values come from closed sets (:data:`Encoding`, :data:`RejectReason`, HTTP status
codes the receiver produces); the expected series are created up front so that rates
and alerts see zeros instead of missing series. The stream depth is read at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["SIZE_BUCKETS", "CollectorMetrics", "Encoding", "RejectReason"]

Encoding = Literal["protobuf", "json", "grpc", "other"]
"""The ``encoding`` label: request body encoding (``grpc`` for OTLP/gRPC), ``other`` for unsupported media types."""

RejectReason = Literal[
    "invalid_id",
    "decode",
    "too_large",
    "unsupported_media_type",
    "unauthorized",
    "backpressure",
    "intake_budget",
]
"""The ``reason`` label of rejections.

``invalid_id``: a span failed validation (partial success); ``decode``: the body (or its
compression) could not be decoded; ``too_large``: the body exceeded the limit;
``unsupported_media_type``: wrong ``Content-Type`` or ``Content-Encoding``;
``unauthorized``: missing or wrong ingest token; ``backpressure``: the stream was full;
``intake_budget``: the bytes of the request bodies in flight had spent the intake budget
(:class:`collector.limits.IntakeBudget`; refused before the body was held or decoded, so its
spans are unknown and counted only here, not in ``vigil_refused_total``).
"""

SIZE_BUCKETS = (1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0)
"""Buckets of ``vigil_otlp_request_size_bytes`` (1 KiB to 64 MiB)."""


class CollectorMetrics:
    """The collector's metrics on one registry. Thread-safe (prometheus_client metrics are).

    Metrics:
        ``vigil_otlp_requests_total{encoding,code}``: OTLP export requests by HTTP status.
        ``vigil_otlp_rejected_requests_total{reason}``: requests refused as a whole.
        ``vigil_otlp_request_size_bytes{encoding}``: decompressed body sizes.
        ``vigil_spans_received_total{encoding}``: spans accepted onto the stream.
        ``vigil_spans_rejected_total{reason}``: spans refused, where their number is known
            (``invalid_id``, ``backpressure``); requests refused before decoding are counted
            only in ``vigil_otlp_rejected_requests_total``.
        ``vigil_refused_total{stage,reason}``: spans refused with a retryable answer (503 /
            ``UNAVAILABLE`` + ``Retry-After``) after they were decoded: the sender still holds them and
            retries (``stream``/``full`` and ``stream``/``bytes`` (its record and byte capacities),
            ``stream``/``inflight`` (the runs in flight over their caps), ``receiver``/``memory_limit``,
            ``kafka``/``full|unavailable``).
        ``vigil_dropped_total{stage,reason}``: spans lost after they were accepted (answered 200):
            ``kafka``/``delivery_failed``.
        ``vigil_stream_depth_batches`` / ``vigil_stream_capacity_batches``: the in-process
            stream, read at scrape time once :meth:`bind_stream` was called.
        ``vigil_attribute_values_truncated_total``: string/bytes attribute values of accepted
            requests cut to ``collector.otlp.MAX_ATTRIBUTE_BYTES``.
        ``vigil_intake_reserved_bytes`` / ``vigil_intake_budget_bytes``: bytes of request bodies in
            flight reserved against the intake budget (read at scrape time), and that budget (0:
            unlimited), once :meth:`bind_intake` was called.

    Args:
        registry: where to register every metric.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.requests = Counter(
            "vigil_otlp_requests", "OTLP export requests by encoding and HTTP status.", ["encoding", "code"], registry=r
        )
        self.rejected_requests = Counter(
            "vigil_otlp_rejected_requests", "OTLP export requests refused as a whole.", ["reason"], registry=r
        )
        self.request_size = Histogram(
            "vigil_otlp_request_size_bytes",
            "Decompressed OTLP request body size.",
            ["encoding"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.spans_received = Counter(
            "vigil_spans_received", "Spans accepted onto the stream.", ["encoding"], registry=r
        )
        self.spans_rejected = Counter("vigil_spans_rejected", "Spans refused, by reason.", ["reason"], registry=r)
        self.refused = Counter(
            "vigil_refused",
            "Spans refused with 503/UNAVAILABLE + Retry-After after decoding (the sender retries them).",
            ["stage", "reason"],
            registry=r,
        )
        self.dropped = Counter(
            "vigil_dropped", "Spans lost after they were accepted (answered 200).", ["stage", "reason"], registry=r
        )
        self.stream_depth = Gauge("vigil_stream_depth_batches", "Records waiting in the in-process stream.", registry=r)
        self.stream_capacity = Gauge("vigil_stream_capacity_batches", "Capacity of the in-process stream.", registry=r)
        self.truncated = Counter(
            "vigil_attribute_values_truncated",
            "String/bytes attribute values of accepted OTLP requests cut to the attribute size limit.",
            registry=r,
        )
        self.intake_reserved = Gauge(
            "vigil_intake_reserved_bytes",
            "Bytes of OTLP request bodies in flight (read, inflated, decoded) reserved against the intake budget.",
            registry=r,
        )
        self.intake_budget = Gauge(
            "vigil_intake_budget_bytes", "Intake budget of the OTLP receivers in bytes (0: unlimited).", registry=r
        )
        for encoding in ("protobuf", "json"):
            self.spans_received.labels(encoding)
        for reason in get_args(RejectReason):
            self.spans_rejected.labels(reason)
            self.rejected_requests.labels(reason)
        self.refused.labels("stream", "full")
        self.refused.labels("stream", "bytes")
        self.refused.labels("receiver", "memory_limit")

    def request(self, encoding: Encoding, code: int) -> None:
        """Count one finished OTLP request with its HTTP status code."""
        self.requests.labels(encoding, str(code)).inc()

    def received(self, encoding: Encoding, spans: int, size_bytes: int, truncated: int = 0) -> None:
        """Count spans accepted from one request (and its attribute values cut), and observe its
        decompressed size."""
        self.spans_received.labels(encoding).inc(spans)
        self.request_size.labels(encoding).observe(size_bytes)
        if truncated:
            self.truncated.inc(truncated)

    def rejected(self, reason: RejectReason, *, spans: int = 0, whole_request: bool = True) -> None:
        """Count a rejection: the request (unless ``whole_request`` is false) and ``spans`` spans."""
        if whole_request:
            self.rejected_requests.labels(reason).inc()
        if spans:
            self.spans_rejected.labels(reason).inc(spans)

    def stream_full(self, spans: int, reason: str = "full") -> None:
        """Count spans the in-process stream refused (answered 503: retried): ``full`` in records,
        ``bytes`` over its byte budget, ``inflight`` while the assembler's runs in flight are over
        their caps (:class:`collector.budget.Pressure`)."""
        self.refused.labels("stream", reason).inc(spans)

    def bind_stream(self, depth: Callable[[], float], capacity: int) -> None:
        """Read the stream depth from ``depth`` at scrape time and publish its capacity."""
        self.stream_depth.set_function(depth)
        self.stream_capacity.set(capacity)

    def bind_intake(self, reserved: Callable[[], float], budget: int) -> None:
        """Read the intake bytes reserved from ``reserved`` at scrape time and publish the budget."""
        self.intake_reserved.set_function(reserved)
        self.intake_budget.set(budget)
