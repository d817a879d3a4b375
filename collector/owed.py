"""Spans answered 503 after they were decoded: the sender will send them again.

An OTLP exporter retries a body refused with 503 + Retry-After, but not in step with the bodies it
sends on its other connections (an OpenTelemetry Collector exports on ten by default): while a
refused body waits out its ``Retry-After``, a body carrying the rest of the same runs — their
roots — may be accepted, the runs close, and the refused spans come back *late*, after the run
was scored, sometimes several refusals later. Forgetting such a run before its retry arrives loses
spans Vigil will answer 200 for.

:class:`OwedSpans` is the ledger of those refusals. The receivers record the spans of every body
they refuse once decoded (:meth:`OwedSpans.record`, on the event-loop thread); the run assembler
(:mod:`scorers.assemble`, on its worker thread) strikes off spans as they arrive
(:meth:`OwedSpans.arrived`) and keeps a run that is still owed spans: it is not closed while it
can wait, and once closed it is not forgotten to make room (it is *pinned*) until the spans come
back or the ledger gives up on them after ``horizon_s``.

Everything is bounded: the ledger holds at most ``max_spans`` span ids (about 100 bytes each);
when full, the oldest trace is forgotten (``vigil_owed_spans_forgotten_total{reason="full"}``),
as is a trace whose spans did not come back within the horizon (``reason="expired"``). While the
ledger is full, the receivers go back to refusing bodies before reading them (they could not
record what they refuse): a sender that never retries — a flood of one-off bodies — costs at most
``max_spans`` spans' decoding per horizon.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from collector.errors import BackpressureError, StreamFullError
from collector.model import Span, TraceBatch
from collector.stream import Publisher, check_room, keeps_bodies

__all__ = [
    "DEFAULT_HORIZON_S",
    "DEFAULT_MAX_DECODE_BYTES",
    "DEFAULT_MAX_OWED_SPANS",
    "OwedMetrics",
    "OwedPublisher",
    "OwedSpans",
]

DEFAULT_HORIZON_S = 60.0
"""Seconds the ledger waits for refused spans to come back: longer than an OpenTelemetry SDK
exporter keeps retrying one body (the Python OTLP/HTTP exporter honours Retry-After and gives up
after 10 s), shorter than an OpenTelemetry Collector may (up to 5 minutes, with back-off) and than
the assembler's idle timeout (``max_idle_s``, 300 s)."""
DEFAULT_MAX_DECODE_BYTES = 4 * 1024 * 1024
"""Largest body decoded only to record its refusal: an SDK's batch of 512 spans with captured content
is well under 1 MB, a Collector's default batch of 8,192 spans a few MB. A larger body is refused
before it is decoded, as before the ledger: several near the size limit decoded at once only to be
refused held hundreds of MiB (a burst of 48 gzip messages of 19.5 MiB over gRPC peaked at 508–536 MiB
under a 512 MiB limit, against 281–299 MiB when refused undecoded; BENCHMARKS.md, "session 13")."""
DEFAULT_MAX_OWED_SPANS = 50_000
"""Span ids the ledger holds at most (about 5 MB): two hundred refused bodies of 250 spans."""


class OwedMetrics:
    """``vigil_owed_spans`` (held now) and ``vigil_owed_spans_forgotten_total{reason}``.

    Args:
        registry: where both are registered.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.held = Gauge(
            "vigil_owed_spans",
            "Spans refused with 503 after decoding whose retry has not arrived yet (their runs are kept).",
            registry=registry,
        )
        self.forgotten = Counter(
            "vigil_owed_spans_forgotten",
            "Refused spans the ledger stopped waiting for: reason=full (the ledger was full), expired "
            "(no retry within the horizon). Their runs may then be forgotten before a late retry.",
            ["reason"],
            registry=registry,
        )
        for reason in ("full", "expired"):
            self.forgotten.labels(reason)

    def bind(self, owed: OwedSpans) -> None:
        """Read ``owed``'s size at scrape time."""
        self.held.set_function(lambda: float(owed.spans))


class OwedSpans:
    """The ledger of refused spans by trace (module doc). Thread-safe.

    Args:
        horizon_s: seconds a refused trace is waited for.
        max_spans: span ids held at most.
        clock: monotonic seconds (injected in tests).
        metrics: counts forgotten spans, when given.
    """

    def __init__(
        self,
        *,
        horizon_s: float = DEFAULT_HORIZON_S,
        max_spans: int = DEFAULT_MAX_OWED_SPANS,
        clock: Callable[[], float] = time.monotonic,
        metrics: OwedMetrics | None = None,
    ) -> None:
        if max_spans <= 0:
            raise ValueError(f"max_spans must be positive, got {max_spans}")
        self._horizon = horizon_s
        self._max = max_spans
        self._clock = clock
        self._metrics = metrics
        self._lock = threading.Lock()
        self._traces: OrderedDict[str, tuple[float, set[str]]] = OrderedDict()  # oldest refusal first
        self.spans = 0
        """Span ids held now."""
        if metrics is not None:
            metrics.bind(self)

    def __contains__(self, trace_id: object) -> bool:
        """Whether ``trace_id`` is owed spans (a plain dict lookup: safe from any thread)."""
        return trace_id in self._traces

    def full(self) -> bool:
        """Whether the ledger holds its maximum (the receivers then refuse before reading)."""
        return self.spans >= self._max

    def record(self, batches: Sequence[TraceBatch]) -> None:
        """Note the spans of a body refused after decoding (each trace's refusal time is refreshed)."""
        now = self._clock()
        with self._lock:
            traces = self._traces
            for batch in batches:
                entry = traces.pop(batch.trace_id, None)
                ids = entry[1] if entry is not None else set()
                before = len(ids)
                ids.update(span.span_id for span in batch.spans)
                traces[batch.trace_id] = (now, ids)
                self.spans += len(ids) - before
            dropped = 0
            while self.spans > self._max and len(traces) > 1:
                _, (_, ids) = traces.popitem(last=False)
                self.spans -= len(ids)
                dropped += len(ids)
        if dropped and self._metrics is not None:
            self._metrics.forgotten.labels("full").inc(dropped)

    def arrived(self, trace_id: str, spans: Iterable[Span]) -> None:
        """Strike off ``spans`` of ``trace_id`` (accepted now); the trace is no longer owed once all are."""
        with self._lock:
            entry = self._traces.get(trace_id)
            if entry is None:
                return
            ids = entry[1]
            before = len(ids)
            ids.difference_update(span.span_id for span in spans)
            self.spans -= before - len(ids)
            if not ids:
                del self._traces[trace_id]

    def expire(self) -> None:
        """Forget traces refused more than the horizon ago (called by the assembler's ticks)."""
        traces = self._traces
        if not traces:
            return
        limit = self._clock() - self._horizon
        expired = 0
        with self._lock:
            while traces:
                trace_id, (at, ids) = next(iter(traces.items()))
                if at > limit:
                    break
                del traces[trace_id]
                self.spans -= len(ids)
                expired += len(ids)
        if expired and self._metrics is not None:
            self._metrics.forgotten.labels("expired").inc(expired)


class OwedPublisher:
    """Wraps the receivers' publisher: the spans of every body it refuses once decoded are recorded
    in ``owed``, and a body is refused before it is read only when the ledger could not record it
    (full) or the publisher is closed (module doc).

    Implements :class:`~collector.stream.Publisher`, :class:`~collector.stream.BodyPublisher` (the
    body goes to ``inner``'s ``publish_body`` when it has one) and :class:`~collector.stream.RoomCheck`.

    Args:
        inner: the publisher (the spool, the memory limiter, the in-process stream).
        owed: the ledger the run assembler reads.
        max_decode_bytes: a body larger than this is refused before it is decoded, even while the
            ledger has room (:data:`DEFAULT_MAX_DECODE_BYTES`).
    """

    def __init__(self, inner: Publisher, owed: OwedSpans, max_decode_bytes: int = DEFAULT_MAX_DECODE_BYTES) -> None:
        self._inner = inner
        self._owed = owed
        self._max_decode = max_decode_bytes

    def publish(self, batches: Sequence[TraceBatch]) -> None:
        """Publish through ``inner``; on refusal, record ``batches`` and re-raise.

        Raises:
            BackpressureError: ``inner`` refused (nothing was taken).
        """
        try:
            self._inner.publish(batches)
        except BackpressureError:
            self._owed.record(batches)
            raise

    async def publish_body(self, batches: Sequence[TraceBatch], body: bytes | bytearray, encoding: str) -> None:
        """:meth:`publish`, keeping ``body`` when ``inner`` is a body publisher (the spool).

        Raises:
            BackpressureError: ``inner`` refused (nothing was taken).
        """
        inner = self._inner
        try:
            if keeps_bodies(inner):
                await inner.publish_body(batches, body, encoding)
            else:
                inner.publish(batches)
        except BackpressureError:
            self._owed.record(batches)
            raise

    def check_room(self, size_hint: int = 0) -> None:
        """Refuse before the body is decoded as ``inner`` would, except for a full in-process stream
        (:class:`~collector.errors.StreamFullError`) while the ledger has room and the body is no larger
        than ``max_decode_bytes`` (``size_hint``: its size, 0 when not known yet — the receivers ask
        again once it is read): that body is decoded, so that its refusal is recorded. Memory, disk and
        a closed stream refuse as before.

        Raises:
            BackpressureError: a publish would be refused now.
        """
        try:
            check_room(self._inner, size_hint)
        except StreamFullError:
            if size_hint > self._max_decode or self._owed.full() or not self.ready():
                raise

    def ready(self) -> bool:
        """Whether ``inner`` takes records (its ``ready()``; True when it has none)."""
        probe = getattr(self._inner, "ready", None)
        return bool(probe()) if callable(probe) else True
