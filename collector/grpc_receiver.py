"""The OTLP/gRPC trace receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``.

The request arrives as raw bytes (no generated servicer, so the body is parsed once, by
:func:`collector.otlp.decode_protobuf`) and is published one record per trace, like the
OTLP/HTTP receiver. gRPC message compression (``grpc-encoding: gzip``) is undone by the
gRPC library before the handler runs. Answers, per the OTLP/gRPC specification:

* ``OK`` with an ``ExportTraceServiceResponse``; rejected spans are reported in
  ``partial_success`` (an empty request is a success too);
* ``INVALID_ARGUMENT`` undecodable body, ``UNAUTHENTICATED`` missing/wrong ingest token:
  never retried by clients;
* ``UNAVAILABLE`` when the publisher is full, with a ``google.rpc.RetryInfo`` in the
  trailing metadata key ``google.rpc.retryinfo-bin`` (read by the Python exporter); before
  the message is decoded when the publisher can tell (:func:`collector.stream.check_room`);
  also (``reason="intake_budget"``) when the message and what decoding it holds
  (:func:`collector.receiver.intake_cost`) do not fit in the intake budget
  (:class:`~collector.limits.IntakeBudget`) shared with the OTLP/HTTP receiver. The gRPC
  library has read (and inflated) the message before the handler runs, so for gRPC the budget
  bounds what is decoded at once, not what the library holds;
* ``RESOURCE_EXHAUSTED`` for a message over ``max_message_bytes`` (decompressed), counted as
  ``too_large`` like the HTTP receiver's 413. The gRPC library's own receive limit is set to
  :data:`GRPC_LIMIT_FACTOR` times ``max_message_bytes``, so the handler sees (and counts) the
  usual oversized message; only one over that outer bound is refused by the library before the
  handler runs, uncounted. The Python exporter retries it (up to 6 tries), unlike the
  specification says.

Metrics use the ``encoding="grpc"`` label. ``vigil_otlp_requests_total{code}`` holds the
HTTP status the OTLP/HTTP receiver would have answered (:data:`HTTP_EQUIVALENT`), so one
query covers both transports: ``OK`` → 200, ``INVALID_ARGUMENT`` → 400,
``UNAUTHENTICATED`` → 401, ``RESOURCE_EXHAUSTED`` → 413, ``UNAVAILABLE`` → 503.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence

import grpc
import structlog
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collector.errors import BackpressureError, DecodeError, ListenError
from collector.limits import IntakeBudget, intake_cost
from collector.metrics import CollectorMetrics, RejectReason
from collector.model import DecodeResult
from collector.otlp import decode_protobuf
from collector.receiver import THREADPOOL_DECODE_BYTES, bearer_accepted
from collector.stream import BodyPublisher, Publisher, check_room

__all__ = ["EXPORT_METHOD", "HTTP_EQUIVALENT", "RETRY_INFO_KEY", "SERVICE", "create_grpc_server"]

log = structlog.get_logger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
"""The fully qualified gRPC service name."""
EXPORT_METHOD = f"/{SERVICE}/Export"
"""The full method path clients call."""
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"
"""Trailing-metadata key of the serialized ``google.rpc.RetryInfo`` sent with ``UNAVAILABLE``."""
HTTP_EQUIVALENT: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.UNAVAILABLE: 503,
}
"""The ``code`` label counted for each status the handler answers."""

_LOG_INTERVAL_S = 10.0

GRPC_LIMIT_FACTOR = 2
"""The gRPC library's receive limit, in multiples of ``max_message_bytes`` (see the module docstring)."""


class _Rejection(Exception):
    """A request refused as a whole; becomes a non-OK status."""

    def __init__(self, code: grpc.StatusCode, reason: RejectReason, message: str, spans: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.spans = spans
        self.trailers: tuple[tuple[str, bytes], ...] = ()


async def create_grpc_server(
    publisher: Publisher,
    metrics: CollectorMetrics,
    *,
    host: str,
    port: int,
    max_message_bytes: int,
    retry_after_s: int,
    ingest_token: str | None = None,
    token_check: Callable[[str], bool] | None = None,
    handshake_timeout_s: float = 10.0,
    idle_timeout_s: float = 300.0,
    intake: IntakeBudget | None = None,
) -> grpc.aio.Server:
    """Build the OTLP/gRPC receiver and bind it to ``host:port``; the caller starts it.

    A coroutine because a ``grpc.aio`` server belongs to the event loop it is made on:
    await it on the loop that will run the server, then ``await server.start()`` and, on
    shutdown, ``await server.stop(grace_s)``.

    Args:
        publisher: takes the decoded records; raises ``BackpressureError`` when full.
        metrics: where requests, spans and rejections are counted (``encoding="grpc"``).
        host: bind address.
        port: TCP port (0 binds an ephemeral port).
        max_message_bytes: receive limit of the decompressed message; over it the call fails with
            ``RESOURCE_EXHAUSTED`` (counted ``too_large``).
        retry_after_s: ``RetryInfo.retry_delay`` sent with ``UNAVAILABLE`` (longer if the
            publisher asks).
        ingest_token: when set, metadata ``authorization: Bearer <token>`` is required.
        token_check: when set, a bearer token is required and accepted when it equals
            ``ingest_token`` or ``token_check(token)`` is true (see :func:`collector.receiver.create_otlp_app`).
        handshake_timeout_s: a connection that has not completed its HTTP/2 handshake by then is
            closed (a silent or slow client; ``VIGIL_HTTP_HEADER_TIMEOUT_S``).
        idle_timeout_s: a connection without a call for this long is closed (GOAWAY).
        intake: the byte budget of bodies in flight, shared with the OTLP/HTTP receiver; ``None``
            never refuses for it.

    Returns:
        A bound, not yet started ``grpc.aio.Server``. The handler decodes bodies of
        :data:`~collector.receiver.THREADPOOL_DECODE_BYTES` or more in a worker thread.

    Raises:
        ListenError: the address could not be bound.
    """
    receiver = _GrpcReceiver(
        publisher, metrics, retry_after_s, ingest_token, token_check, max_message_bytes=max_message_bytes, intake=intake
    )
    handler = grpc.unary_unary_rpc_method_handler(receiver.export)  # no (de)serializers: raw bytes
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", min(2**31 - 1, GRPC_LIMIT_FACTOR * max_message_bytes)),
            ("grpc.so_reuseport", 0),  # a busy port fails to bind instead of being shared silently
            ("grpc.server_handshake_timeout_ms", max(1, int(handshake_timeout_s * 1000))),
            ("grpc.max_connection_idle_ms", max(1, int(idle_timeout_s * 1000))),
        ]
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise ListenError("OTLP/gRPC, VIGIL_OTLP_GRPC_PORT", host, port) from exc
    metrics.spans_received.labels("grpc")  # the series exists (at zero) only when the receiver does
    log.info("otlp_grpc_bound", host=host, port=bound)
    return server


class _GrpcReceiver:
    """The ``Export`` handler and its per-server state."""

    def __init__(
        self,
        publisher: Publisher,
        metrics: CollectorMetrics,
        retry_after_s: int,
        token: str | None,
        token_check: Callable[[str], bool] | None = None,
        *,
        max_message_bytes: int = 2**31 - 1,
        intake: IntakeBudget | None = None,
    ) -> None:
        self._limit = max_message_bytes
        self._intake = intake or IntakeBudget(0)
        self._publisher = publisher
        self._metrics = metrics
        self._retry_after_s = retry_after_s
        self._token = f"Bearer {token}".encode() if token else None
        self._check = token_check
        self._last_log: dict[str, float] = {}

    async def export(self, body: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """Handle one ``Export`` call: ``body`` is the serialized request; returns the response bytes."""
        try:
            result = await self._accept(body, context)
        except _Rejection as rejection:
            self._count(rejection)
            await context.abort(rejection.code, rejection.message, trailing_metadata=rejection.trailers)
            raise  # not reached: abort raises
        self._metrics.received("grpc", result.accepted, len(body), result.truncated)
        self._metrics.rejected("invalid_id", spans=result.rejected, whole_request=False)
        self._metrics.request("grpc", HTTP_EQUIVALENT[grpc.StatusCode.OK])
        return _response(result)

    async def _accept(self, body: bytes, context: grpc.aio.ServicerContext) -> DecodeResult:
        self._authorize(context.invocation_metadata() or ())
        if len(body) > self._limit:
            raise _Rejection(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "too_large", f"message exceeds {self._limit} bytes"
            )
        try:
            check_room(self._publisher, len(body))
        except BackpressureError as exc:
            raise self._backpressure(exc, spans=0) from exc
        reservation = self._intake.reservation()
        if not reservation.grow(intake_cost(len(body))):
            budget = self._intake.budget_bytes
            message = f"intake budget of {budget} bytes (messages in flight) spent"
            spent = BackpressureError(self._retry_after_s, message)
            raise self._backpressure(spent, spans=0, reason="intake_budget")
        try:  # the message and its decoded spans are reserved until they are handed on
            try:
                if len(body) >= THREADPOOL_DECODE_BYTES:
                    result = await asyncio.to_thread(decode_protobuf, body)
                else:
                    result = decode_protobuf(body)
            except DecodeError as exc:
                raise _Rejection(grpc.StatusCode.INVALID_ARGUMENT, "decode", str(exc)) from exc
            await self._publish(result, body)
            return result
        finally:
            reservation.release()

    def _authorize(self, metadata: Sequence[tuple[str, str | bytes]]) -> None:
        if self._token is None and self._check is None:
            return
        given = next((v for k, v in metadata if k == "authorization"), "")
        given_bytes = given.encode() if isinstance(given, str) else given
        if not bearer_accepted(given_bytes, self._token, self._check):
            raise _Rejection(grpc.StatusCode.UNAUTHENTICATED, "unauthorized", "missing or invalid bearer token")

    async def _publish(self, result: DecodeResult, body: bytes) -> None:
        if not result.batches:
            return
        try:
            if isinstance(self._publisher, BodyPublisher):  # spooled: answered once the body is on disk
                await self._publisher.publish_body(result.batches, body, "protobuf")
            else:
                self._publisher.publish(result.batches)
        except BackpressureError as exc:
            raise self._backpressure(exc, spans=result.accepted) from exc

    def _backpressure(
        self, exc: BackpressureError, *, spans: int, reason: RejectReason = "backpressure"
    ) -> _Rejection:
        """``UNAVAILABLE`` with ``RetryInfo``; ``spans`` is 0 when refused before decoding."""
        rejection = _Rejection(grpc.StatusCode.UNAVAILABLE, reason, f"{exc}; retry later", spans=spans)
        delay = max(self._retry_after_s, math.ceil(exc.retry_after))
        info = RetryInfo(retry_delay=Duration(seconds=delay))
        rejection.trailers = ((RETRY_INFO_KEY, info.SerializeToString()),)
        return rejection

    def _count(self, rejection: _Rejection) -> None:
        """Count and log ``rejection`` before the call is aborted with its status."""
        self._metrics.rejected(rejection.reason, spans=rejection.spans)
        self._metrics.request("grpc", HTTP_EQUIVALENT[rejection.code])
        self._log(rejection)

    def _log(self, rejection: _Rejection) -> None:
        """Log a rejection at most once per reason every ``_LOG_INTERVAL_S``."""
        now = time.monotonic()
        if now - self._last_log.get(rejection.reason, -_LOG_INTERVAL_S) >= _LOG_INTERVAL_S:
            self._last_log[rejection.reason] = now
            log.warning(
                "otlp_grpc_request_rejected",
                code=rejection.code.name,
                reason=rejection.reason,
                detail=rejection.message,
            )


def _response(result: DecodeResult) -> bytes:
    """The serialized ``ExportTraceServiceResponse``; ``partial_success`` only when needed."""
    response = ExportTraceServiceResponse()
    message = "; ".join(result.errors)
    if result.rejected or message:
        response.partial_success.rejected_spans = result.rejected
        response.partial_success.error_message = message
    return bytes(response.SerializeToString())
