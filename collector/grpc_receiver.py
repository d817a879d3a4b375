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
  trailing metadata key ``google.rpc.retryinfo-bin`` (read by the Python exporter) and in the
  details of the ``google.rpc.Status`` in ``grpc-status-details-bin`` (read by the Go exporter); before
  the message is decoded when the publisher can tell (:func:`collector.stream.check_room`);
  also (``reason="intake_budget"``) when the call cannot reserve its bytes in the intake
  budget (:class:`~collector.limits.IntakeBudget`) shared with the OTLP/HTTP receiver (see
  *Admission* below);
* ``RESOURCE_EXHAUSTED`` for a message over ``max_message_bytes`` (decompressed), counted as
  ``too_large`` like the HTTP receiver's 413. The gRPC library's own receive limit is set to
  :data:`GRPC_LIMIT_FACTOR` times ``max_message_bytes``, so the handler sees (and counts) the
  usual oversized message; only one over that outer bound is refused by the library before the
  handler runs, uncounted. The Python exporter retries it (up to 6 tries), unlike the
  specification says.

Admission. The method is registered as client-streaming (``stream_unary``; on the wire a unary call
is the same HTTP/2 stream with one message), because ``grpc.aio`` runs a unary handler only after
it has received and inflated the whole message, but calls a client-streaming handler first and
reads a message when the handler asks for it (``_handle_unary_unary_rpc`` versus
``_handle_stream_unary_rpc`` in grpc's
``src/python/grpcio/grpc/_cython/_cygrpc/aio/server.pyx.pxi``). Before asking, the handler reserves
the worst case a message can hold while it is received, :func:`grpc_read_cost` (the inflated
message in the library and its copy handed to Python, each up to the library's receive limit), and
once the message is read it gives back all but :func:`~collector.limits.intake_cost` of its real
size (the body and its decoded spans). So at most :func:`concurrent_reads` messages are received at
once, and the bytes of every call in flight are within the budget. A call that does not fit
**waits** (holding nothing but the compressed bytes the HTTP/2 flow-control window lets the client
send ahead: the initial 64 KiB of a stream, since the server does not probe the bandwidth-delay
product, ``grpc.http2.bdp_probe=0``; the handler's read then opens the window to the whole
message) up to :data:`ADMISSION_WAIT_S`, with at most :data:`MAX_WAITING` calls waiting; then,
or beyond that, it is refused with ``UNAVAILABLE`` + ``RetryInfo`` (``intake_budget``). A call
admitted after a wait checks the publisher's room for a message of ``max_message_bytes`` before
reading (the calls before it may have filled the stream; reading a large message only to refuse it
costs as much as keeping it). Small concurrent exports therefore queue for a few milliseconds
instead of being refused, a lone call is never refused for the budget (a reservation larger than
the budget passes while nothing else is reserved), and a burst of large messages is received one
budget's worth at a time. ``grpc.aio``'s own ``maximum_concurrent_rpcs`` is not used: it answers
``RESOURCE_EXHAUSTED`` without ``RetryInfo`` (before reading the message, but counted nowhere), a
count cannot tell a 1 KiB export from a 20 MiB one, and the OTLP specification
(https://opentelemetry.io/docs/specs/otlp/#failures) has clients retry ``RESOURCE_EXHAUSTED`` only
when it carries ``RetryInfo``: the Go exporter (``otlptracegrpc``, ``retryableGRPCStatus``) drops
the batch otherwise, the Python exporter retries it anyway (it lists the code as retryable). Both
retry ``UNAVAILABLE``; the Python exporter waits the ``RetryInfo`` delay of the
``google.rpc.retryinfo-bin`` trailer, the Go exporter reads ``RetryInfo`` from the status
details (``grpc-status-details-bin``), which carry it too (:func:`retry_trailers`).

Metrics use the ``encoding="grpc"`` label. ``vigil_otlp_requests_total{code}`` holds the
HTTP status the OTLP/HTTP receiver would have answered (:data:`HTTP_EQUIVALENT`), so one
query covers both transports: ``OK`` → 200, ``INVALID_ARGUMENT`` → 400,
``UNAUTHENTICATED`` → 401, ``RESOURCE_EXHAUSTED`` → 413, ``UNAVAILABLE`` → 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence

import grpc
import structlog
from google.protobuf.any_pb2 import Any
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collector.admission import ADMISSION_WAIT_S, MAX_WAITING, RECHECK_S
from collector.errors import BackpressureError, DecodeError, ListenError
from collector.limits import IntakeBudget, Reservation, intake_cost
from collector.metrics import CollectorMetrics, RejectReason
from collector.model import DecodeResult
from collector.otlp import decode_protobuf
from collector.receiver import THREADPOOL_DECODE_BYTES, bearer_accepted
from collector.stream import Publisher, check_room, keeps_bodies

__all__ = [
    "ADMISSION_WAIT_S",
    "EXPORT_METHOD",
    "GRPC_LIMIT_FACTOR",
    "HTTP_EQUIVALENT",
    "MAX_WAITING",
    "RETRY_INFO_KEY",
    "SERVICE",
    "STATUS_DETAILS_KEY",
    "concurrent_reads",
    "create_grpc_server",
    "grpc_read_cost",
    "receive_limit",
    "retry_trailers",
]

log = structlog.get_logger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
"""The fully qualified gRPC service name."""
EXPORT_METHOD = f"/{SERVICE}/Export"
"""The full method path clients call."""
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"
"""Trailing-metadata key of the serialized ``google.rpc.RetryInfo`` sent with ``UNAVAILABLE``."""
STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""Trailing-metadata key of the serialized ``google.rpc.Status`` (with the ``RetryInfo`` in its details)."""
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


def receive_limit(max_message_bytes: int) -> int:
    """The gRPC library's receive limit (``grpc.max_receive_message_length``) for ``max_message_bytes``:
    :data:`GRPC_LIMIT_FACTOR` times it, at most 2**31 - 1."""
    return min(2**31 - 1, GRPC_LIMIT_FACTOR * max_message_bytes)


def grpc_read_cost(max_message_bytes: int) -> int:
    """Bytes reserved for one call while its message is received: twice the receive limit (the
    library's inflated message and the ``bytes`` copy handed to the handler, both at most the
    receive limit). It covers :func:`~collector.limits.intake_cost` of any message the handler keeps
    (3.5 × at most ``max_message_bytes`` < 2 × 2 × ``max_message_bytes``), so the reservation only
    shrinks once the real size is known.
    """
    return 2 * receive_limit(max_message_bytes)


def concurrent_reads(budget_bytes: int, max_message_bytes: int) -> int:
    """How many gRPC messages may be received at once when nothing else holds the intake budget:
    ``budget_bytes // grpc_read_cost(max_message_bytes)``, at least 1 (a lone call always passes);
    0 when the budget is unlimited (``budget_bytes`` ≤ 0: no cap)."""
    if budget_bytes <= 0:
        return 0
    return max(1, budget_bytes // grpc_read_cost(max_message_bytes))


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
    admission_wait_s: float = ADMISSION_WAIT_S,
    max_waiting: int = MAX_WAITING,
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
            never refuses for it. A call reserves :func:`grpc_read_cost` before its message is read.
        admission_wait_s: how long a call may wait for room in ``intake`` before ``UNAVAILABLE``.
        max_waiting: how many calls may wait at once; one more is refused at once.

    Returns:
        A bound, not yet started ``grpc.aio.Server``. The handler decodes bodies of
        :data:`~collector.receiver.THREADPOOL_DECODE_BYTES` or more in a worker thread.

    Raises:
        ListenError: the address could not be bound.
    """
    receiver = _GrpcReceiver(
        publisher,
        metrics,
        retry_after_s,
        ingest_token,
        token_check,
        max_message_bytes=max_message_bytes,
        intake=intake,
        wait_s=admission_wait_s,
        max_waiting=max_waiting,
    )
    # client-streaming, so the handler runs before the message is read (module docstring, Admission);
    # no (de)serializers: raw bytes
    handler = grpc.stream_unary_rpc_method_handler(receiver.export_call)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", receive_limit(max_message_bytes)),
            ("grpc.so_reuseport", 0),  # a busy port fails to bind instead of being shared silently
            ("grpc.server_handshake_timeout_ms", max(1, int(handshake_timeout_s * 1000))),
            ("grpc.max_connection_idle_ms", max(1, int(idle_timeout_s * 1000))),
            # no BDP probing: a call not yet admitted can have only the initial 64 KiB stream window
            # of its message sent ahead (module docstring, Admission)
            ("grpc.http2.bdp_probe", 0),
        ]
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise ListenError("OTLP/gRPC, VIGIL_OTLP_GRPC_PORT", host, port) from exc
    metrics.spans_received.labels("grpc")  # the series exists (at zero) only when the receiver does
    budget = intake.budget_bytes if intake is not None else 0
    log.info("otlp_grpc_bound", host=host, port=bound, concurrent_reads=concurrent_reads(budget, max_message_bytes))
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
        wait_s: float = ADMISSION_WAIT_S,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self._limit = max_message_bytes
        self._intake = intake or IntakeBudget(0)
        self._read_cost = grpc_read_cost(max_message_bytes)
        self._wait_s = wait_s
        self._max_waiting = max_waiting
        self._waiting = 0
        self._room = asyncio.Condition()  # notified when a call gives bytes back
        self._publisher = publisher
        self._metrics = metrics
        self._retry_after_s = retry_after_s
        self._token = f"Bearer {token}".encode() if token else None
        self._check = token_check
        self._last_log: dict[str, float] = {}

    async def export_call(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
        """Handle one ``Export`` call before its message is read: admit it, read its one message
        (the serialized request), decode and publish it; returns the response bytes. ``requests``
        is unused: the message is read with ``context.read()`` once the call is admitted."""
        reservation = self._intake.reservation()
        try:
            try:
                body = await self._receive(context, reservation)
                result = await self._accept(body, reservation)
            except _Rejection as rejection:
                self._count(rejection)
                await context.abort(rejection.code, rejection.message, trailing_metadata=rejection.trailers)
                raise  # not reached: abort raises
        finally:
            reservation.release()
            await self._notify()
        self._metrics.received("grpc", result.accepted, len(body), result.truncated)
        self._metrics.rejected("invalid_id", spans=result.rejected, whole_request=False)
        self._metrics.request("grpc", HTTP_EQUIVALENT[grpc.StatusCode.OK])
        return _response(result)

    async def _receive(self, context: grpc.aio.ServicerContext, reservation: Reservation) -> bytes:
        """Authorize the call, reserve :func:`grpc_read_cost` (waiting for room), then read the message."""
        self._authorize(context.invocation_metadata() or ())
        try:
            check_room(self._publisher, 0)
        except BackpressureError as exc:
            raise self._backpressure(exc, spans=0) from exc
        admitted = await self._reserve(reservation, self._read_cost)
        if admitted is None:
            budget = self._intake.budget_bytes
            message = f"intake budget of {budget} bytes (messages in flight) spent"
            spent = BackpressureError(self._retry_after_s, message)
            raise self._backpressure(spent, spans=0, reason="intake_budget")
        if admitted:  # it waited: other calls were in flight, so room is checked for the largest message
            try:
                check_room(self._publisher, self._limit)
            except BackpressureError as exc:
                raise self._backpressure(exc, spans=0) from exc
        body = await context.read()
        if not isinstance(body, bytes):  # EOF: the client half-closed without a message
            raise _Rejection(grpc.StatusCode.INVALID_ARGUMENT, "decode", "no request message")
        return body

    async def _reserve(self, reservation: Reservation, size: int) -> bool | None:
        """Reserve ``size`` bytes, waiting up to ``wait_s`` for room: False when reserved at once, True
        after a wait, None when refused (nothing taken)."""
        if reservation.grow(size):
            return False
        if self._waiting >= self._max_waiting:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        self._waiting += 1
        try:
            while (remaining := deadline - loop.time()) > 0:
                async with self._room:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._room.wait(), min(remaining, RECHECK_S))
                if reservation.grow(size):
                    return True
            return None
        finally:
            self._waiting -= 1

    async def _notify(self) -> None:
        """Wake the calls waiting for room (bytes were given back)."""
        if self._waiting:
            async with self._room:
                self._room.notify_all()

    async def _accept(self, body: bytes, reservation: Reservation) -> DecodeResult:
        """Keep the reservation of what ``body`` and its decoded spans hold, decode and publish it."""
        if len(body) > self._limit:
            raise _Rejection(grpc.StatusCode.RESOURCE_EXHAUSTED, "too_large", f"message exceeds {self._limit} bytes")
        try:
            check_room(self._publisher, len(body))
        except BackpressureError as exc:
            raise self._backpressure(exc, spans=0) from exc
        cost = intake_cost(len(body))  # at most the read cost for a message within the limit
        if reservation.held > cost:
            reservation.shrink(reservation.held - cost)
            await self._notify()
        try:
            if len(body) >= THREADPOOL_DECODE_BYTES:
                result = await asyncio.to_thread(decode_protobuf, body)
            else:
                result = decode_protobuf(body)
        except DecodeError as exc:
            raise _Rejection(grpc.StatusCode.INVALID_ARGUMENT, "decode", str(exc)) from exc
        await self._publish(result, body)
        return result

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
            if keeps_bodies(self._publisher):  # spooled: answered once the body is on disk
                await self._publisher.publish_body(result.batches, body, "protobuf")
            else:
                self._publisher.publish(result.batches)
        except BackpressureError as exc:
            raise self._backpressure(exc, spans=result.accepted) from exc

    def _backpressure(self, exc: BackpressureError, *, spans: int, reason: RejectReason = "backpressure") -> _Rejection:
        """``UNAVAILABLE`` with ``RetryInfo``; ``spans`` is 0 when refused before decoding."""
        rejection = _Rejection(grpc.StatusCode.UNAVAILABLE, reason, f"{exc}; retry later", spans=spans)
        delay = max(self._retry_after_s, math.ceil(exc.retry_after))
        rejection.trailers = retry_trailers(rejection.message, delay)
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


def retry_trailers(message: str, delay_s: int) -> tuple[tuple[str, bytes], ...]:
    """The trailing metadata of an ``UNAVAILABLE`` answer carrying ``google.rpc.RetryInfo`` of ``delay_s``, twice:

    * :data:`RETRY_INFO_KEY` (``google.rpc.retryinfo-bin``), the bare ``RetryInfo``, which the Python
      exporter reads;
    * :data:`STATUS_DETAILS_KEY` (``grpc-status-details-bin``), a ``google.rpc.Status`` of the same
      code and message whose details hold the ``RetryInfo``: the gRPC rich error model, which
      ``status.FromError(err).Details()`` decodes in grpc-go and the Go exporter reads
      (``otlptracegrpc``'s ``throttleDelay``).
    """
    info = RetryInfo(retry_delay=Duration(seconds=delay_s))
    detail = Any()
    detail.Pack(info)
    status = Status(code=grpc.StatusCode.UNAVAILABLE.value[0], message=message, details=[detail])
    return ((RETRY_INFO_KEY, info.SerializeToString()), (STATUS_DETAILS_KEY, status.SerializeToString()))


def _response(result: DecodeResult) -> bytes:
    """The serialized ``ExportTraceServiceResponse``; ``partial_success`` only when needed."""
    response = ExportTraceServiceResponse()
    message = "; ".join(result.errors)
    if result.rejected or message:
        response.partial_success.rejected_spans = result.rejected
        response.partial_success.error_message = message
    return bytes(response.SerializeToString())
