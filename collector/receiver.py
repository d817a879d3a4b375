"""The OTLP/HTTP trace receiver: an ASGI app serving ``POST /v1/traces``, ``/healthz``, ``/readyz``.

``POST /v1/traces`` takes ``application/x-protobuf`` or ``application/json`` bodies,
optionally ``gzip``/``deflate`` compressed, decodes them and publishes one record per
trace. Answers, per the OTLP/HTTP specification:

* 200 with an ``ExportTraceServiceResponse`` in the request's encoding; rejected spans are
  reported in ``partial_success`` (an empty request is a success too);
* 400 undecodable body or compression, 401 missing/wrong ingest token, 413 body over the
  limit (before or after decompression), 415 unsupported ``Content-Type`` or
  ``Content-Encoding``: never retried by clients;
* 503 with ``Retry-After`` when the publisher is full: retried by every Python exporter
  version (older ones do not retry 429). A publisher that can tell it is full before the
  request is read (:class:`~collector.stream.RoomCheck`) refuses it before its body is read
  or decoded, so that shedding costs microseconds, not a decode; such requests are counted
  in ``vigil_otlp_rejected_requests_total{reason="backpressure"}`` (their spans are unknown);
* 503 with ``Retry-After`` when the body's bytes do not fit in the intake budget
  (:class:`~collector.limits.IntakeBudget`): a request is admitted before a byte of its body is
  read (:mod:`collector.admission`), reserving the ``Content-Length`` of a plain body, ten times
  that of a gzip/deflate one (:data:`~collector.admission.COMPRESSION_ESTIMATE`), or the size limit
  without one; requests that do not fit wait in arrival order (up to
  :data:`~collector.admission.ADMISSION_WAIT_S`) or are refused at once when the ones waiting ahead
  fill the budget. Unadmitted bodies stay in the socket buffers (uvicorn stops reading past 64 KiB
  the application has not asked for). A body inflating past its estimate reserves the rest step by
  step, and is refused if the budget is spent by then; what it inflated is dropped at once and the
  rest of its body is left to the server, which discards it after the answer
  (``reason="intake_budget"``).

A compressed body is inflated into one ``bytearray``, never into pieces joined into a copy; the
chunks of a plain body are joined once and dropped. Decoders and the spool take it as it is.

Error bodies are a ``google.rpc.Status`` (protobuf) or ``{"code", "message"}`` (JSON),
with a gRPC status code. Every request is counted in :class:`CollectorMetrics`.
"""

from __future__ import annotations

import hmac
import json
import math
import time
import zlib
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import structlog
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from collector.admission import ADMISSION_WAIT_S, Admission, admission_bytes
from collector.errors import BackpressureError, BodyTooLargeError, DecodeError
from collector.limits import IntakeBudget, Reservation, intake_cost
from collector.metrics import CollectorMetrics, Encoding, RejectReason
from collector.model import DecodeResult
from collector.otlp import decode_json, decode_protobuf
from collector.stream import Publisher, check_room, keeps_bodies

__all__ = ["INFLATE_STEP_BYTES", "THREADPOOL_DECODE_BYTES", "create_otlp_app"]

log = structlog.get_logger(__name__)

THREADPOOL_DECODE_BYTES = 256 * 1024
"""Bodies at least this large are decoded in a worker thread, off the event loop."""

INFLATE_STEP_BYTES = 256 * 1024
"""Compressed bodies are inflated at most this many bytes at a time, each step reserved first."""

_MEDIA_TYPES: dict[str, Encoding] = {"application/x-protobuf": "protobuf", "application/json": "json"}
_CONTENT_TYPES = {"protobuf": "application/x-protobuf", "json": "application/json"}
_DECODERS: dict[str, Callable[[bytes | bytearray], DecodeResult]] = {"protobuf": decode_protobuf, "json": decode_json}
_GRPC_CODES = {400: 3, 401: 16, 413: 3, 415: 3, 503: 14}  # INVALID_ARGUMENT, UNAUTHENTICATED, UNAVAILABLE
_LOG_INTERVAL_S = 10.0


@runtime_checkable
class _SupportsReady(Protocol):
    def ready(self) -> bool: ...


class _Rejection(Exception):
    """A request refused as a whole; becomes an error response."""

    def __init__(self, status: int, reason: RejectReason, message: str, spans: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.spans = spans
        self.headers: dict[str, str] = {}


def create_otlp_app(
    publisher: Publisher,
    metrics: CollectorMetrics,
    *,
    max_body_bytes: int,
    retry_after_s: int,
    ingest_token: str | None = None,
    ready: Callable[[], bool] | None = None,
    token_check: Callable[[str], bool] | None = None,
    intake: IntakeBudget | None = None,
    admission_wait_s: float = ADMISSION_WAIT_S,
) -> Starlette:
    """Build the OTLP/HTTP receiver app.

    Args:
        publisher: takes the decoded records; raises ``BackpressureError`` when full.
        metrics: where requests, spans and rejections are counted.
        max_body_bytes: body limit, applied to the raw and to the decompressed body.
        retry_after_s: ``Retry-After`` seconds sent with 503 (longer if the publisher asks).
        ingest_token: when set, ``Authorization: Bearer <token>`` is required.
        ready: readiness probe for ``/readyz``; defaults to ``publisher.ready()`` when the
            publisher has one, else always ready.
        token_check: when set, a bearer token is required and accepted when it equals
            ``ingest_token`` or ``token_check(token)`` is true (stored ``ingest`` tokens, injected by
            the composition root; it must be fast — cache lookups — as it runs on the event loop).
        intake: the byte budget of bodies in flight, shared with the other receivers of the
            process; ``None`` never refuses for it.
        admission_wait_s: how long a request may wait for room in ``intake`` before 503
            (:mod:`collector.admission`).

    Returns:
        A Starlette app. Handlers never block the event loop on large decodes.
    """
    receiver = _Receiver(
        publisher,
        metrics,
        max_body_bytes,
        retry_after_s,
        ingest_token,
        token_check=token_check,
        intake=intake,
        admission_wait_s=admission_wait_s,
    )
    probe = ready or (publisher.ready if isinstance(publisher, _SupportsReady) else (lambda: True))

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        ok = probe()
        return JSONResponse({"status": "ok" if ok else "unavailable"}, status_code=200 if ok else 503)

    return Starlette(
        routes=[
            Route("/v1/traces", receiver.export, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
        ]
    )


def bearer_accepted(given: bytes, expected: bytes | None, check: Callable[[str], bool] | None) -> bool:
    """Whether an ``Authorization`` value carries the static token or one ``check`` accepts."""
    if expected is not None and hmac.compare_digest(given, expected):
        return True
    scheme, _, secret = given.decode(errors="replace").partition(" ")
    return check is not None and scheme.lower() == "bearer" and bool(secret.strip()) and check(secret.strip())


class _Receiver:
    """The ``POST /v1/traces`` handler and its per-app state."""

    def __init__(
        self,
        publisher: Publisher,
        metrics: CollectorMetrics,
        limit: int,
        retry_after_s: int,
        token: str | None,
        *,
        token_check: Callable[[str], bool] | None = None,
        intake: IntakeBudget | None = None,
        admission_wait_s: float = ADMISSION_WAIT_S,
    ) -> None:
        self._publisher = publisher
        self._intake = intake or IntakeBudget(0)
        self._admission = Admission(self._intake, wait_s=admission_wait_s)
        self._metrics = metrics
        self._limit = limit
        self._retry_after_s = retry_after_s
        self._token = f"Bearer {token}".encode() if token else None
        self._check = token_check
        self._last_log: dict[str, float] = {}

    async def export(self, request: Request) -> Response:
        """Handle one OTLP/HTTP export request."""
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        encoding: Encoding = _MEDIA_TYPES.get(media_type, "other")
        try:
            result, size = await self._accept(request, encoding, media_type)
        except _Rejection as rejection:
            return self._refuse(encoding, rejection)
        self._metrics.received(encoding, result.accepted, size, result.truncated)
        self._metrics.rejected("invalid_id", spans=result.rejected, whole_request=False)
        self._metrics.request(encoding, 200)
        return _success(encoding, result)

    async def _accept(self, request: Request, encoding: Encoding, media_type: str) -> tuple[DecodeResult, int]:
        self._authorize(request)
        if encoding == "other":
            raise _Rejection(
                415,
                "unsupported_media_type",
                f"unsupported Content-Type {media_type!r}: use application/x-protobuf or application/json",
            )
        self._check_room(request, encoding)
        declared = _declared_length(request)
        if declared > self._limit:
            raise _too_large(self._limit)
        inflater = _Inflater.for_encoding(request.headers.get("content-encoding", ""), self._limit)
        covered = admission_bytes(declared, inflater is not None, self._limit)
        reservation = self._intake.reservation()
        try:  # the body and its decoded spans are reserved until they are handed on
            await self._admit(request, encoding, reservation, covered)
            body = await self._read_body(request, reservation, covered, inflater)
            try:  # its size is known now (inflated): refused here rather than after decoding
                check_room(self._publisher, len(body))
            except BackpressureError as exc:
                raise self._backpressure(exc, spans=0) from exc
            if reservation.held > (cost := intake_cost(len(body))):  # keep what it holds, not the estimate
                reservation.shrink(reservation.held - cost)
                self._admission.wake()
            decode = _DECODERS[encoding]
            try:
                if len(body) >= THREADPOOL_DECODE_BYTES:
                    result = await run_in_threadpool(decode, body)
                else:
                    result = decode(body)
            except DecodeError as exc:
                raise _Rejection(400, "decode", str(exc)) from exc
            await self._publish(result, body, encoding)
            return result, len(body)
        finally:
            reservation.release()
            self._admission.wake()

    async def _admit(self, request: Request, encoding: Encoding, reservation: Reservation, covered: int) -> None:
        """Reserve the cost of ``covered`` body bytes before the body is read, waiting in arrival order.

        Raises:
            _Rejection: 503 (``intake_budget``) refused at once or after the wait; 503
                (``backpressure``) when the publisher filled up while it waited.
        """
        admitted = await self._admission.admit(reservation, intake_cost(covered))
        if admitted is None:
            raise self._budget_spent()
        if admitted:  # it waited: the requests before it may have filled the publisher
            self._check_room(request, encoding)

    def _authorize(self, request: Request) -> None:
        if self._token is None and self._check is None:
            return
        given = request.headers.get("authorization", "").encode()
        if not bearer_accepted(given, self._token, self._check):
            rejection = _Rejection(401, "unauthorized", "missing or invalid bearer token")
            rejection.headers["WWW-Authenticate"] = "Bearer"
            raise rejection

    async def _read_body(
        self, request: Request, reservation: Reservation, covered: int, inflater: _Inflater | None
    ) -> bytes | bytearray:
        """The whole (decompressed) body, its cost reserved in ``reservation`` before it is held.

        ``covered`` body bytes were reserved on admission; a plain body longer than that (no or a
        wrong ``Content-Length``) reserves the rest chunk by chunk (its chunks joined once, then
        dropped: the reservation covers that moment), a compressed one step by step as it inflates
        into one buffer past ``covered``. When it is refused on the way, what it read is dropped at
        once and the rest is left unread (the server discards it after the answer).
        """
        if inflater is not None:
            inflater.prepay(covered + 1)  # the step that detects an overflow holds one byte past the limit
        reserved = covered
        body = bytearray()  # the inflated body
        chunks: list[bytes] = []  # the plain one
        raw = 0
        try:
            async for chunk in request.stream():
                raw += len(chunk)
                if raw > self._limit:
                    raise _too_large(self._limit)
                if inflater is not None:
                    inflater.feed(chunk, body, lambda n: self._reserve(reservation, n))
                    continue
                if raw > reserved:  # no (or a wrong) Content-Length: reserve before holding
                    self._reserve(reservation, intake_cost(raw - reserved))
                    reserved = raw
                chunks.append(chunk)
            if inflater is not None:
                inflater.finish(body, lambda n: self._reserve(reservation, n))
        except BodyTooLargeError as exc:
            raise _too_large(exc.limit) from exc
        except DecodeError as exc:
            raise _Rejection(400, "decode", str(exc)) from exc
        except _Rejection:
            body.clear()  # the traceback keeps the inflater's frames, which refer to the buffer
            chunks.clear()
            raise
        if inflater is not None:
            return body
        plain = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        return plain

    def _reserve(self, reservation: Reservation, size: int) -> None:
        """Reserve ``size`` bytes or refuse the request with 503 + Retry-After.

        Raises:
            _Rejection: 503 (``intake_budget``), the budget is spent.
        """
        if not reservation.grow(size):
            reservation.release()  # give the rest back now: others can go on while this answers
            self._admission.wake()
            raise self._budget_spent()

    def _budget_spent(self) -> _Rejection:
        budget = self._intake.budget_bytes
        rejection = _Rejection(
            503, "intake_budget", f"intake budget of {budget} bytes (request bodies in flight) spent; retry later"
        )
        rejection.headers["Retry-After"] = str(self._retry_after_s)
        return rejection

    def _check_room(self, request: Request, encoding: Encoding) -> None:
        """503 before the body is read when the publisher would refuse it anyway (a body declared
        over the limit is left to :meth:`_read_body`: 413 is final, 503 would only be retried)."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._limit:
            return
        plain = encoding == "protobuf" and not request.headers.get("content-encoding", "").strip()
        try:
            check_room(self._publisher, int(declared) if plain and declared.isdigit() else 0)
        except BackpressureError as exc:
            raise self._backpressure(exc, spans=0) from exc

    async def _publish(self, result: DecodeResult, body: bytes | bytearray, encoding: Encoding) -> None:
        if not result.batches:
            return
        try:
            if keeps_bodies(self._publisher):  # spooled: answered once the body is on disk
                await self._publisher.publish_body(result.batches, body, encoding)
            else:
                self._publisher.publish(result.batches)
        except BackpressureError as exc:
            raise self._backpressure(exc, spans=result.accepted) from exc

    def _backpressure(self, exc: BackpressureError, *, spans: int) -> _Rejection:
        rejection = _Rejection(503, "backpressure", f"{exc}; retry later", spans=spans)
        rejection.headers["Retry-After"] = str(max(self._retry_after_s, math.ceil(exc.retry_after)))
        return rejection

    def _refuse(self, encoding: Encoding, rejection: _Rejection) -> Response:
        self._metrics.rejected(rejection.reason, spans=rejection.spans)
        self._metrics.request(encoding, rejection.status)
        self._log(rejection)
        code = _GRPC_CODES.get(rejection.status, 2)
        if encoding == "json":
            return JSONResponse(
                {"code": code, "message": rejection.message}, rejection.status, headers=rejection.headers
            )
        body = Status(code=code, message=rejection.message).SerializeToString()
        return Response(body, rejection.status, rejection.headers, media_type="application/x-protobuf")

    def _log(self, rejection: _Rejection) -> None:
        """Log a rejection at most once per reason every ``_LOG_INTERVAL_S``."""
        now = time.monotonic()
        if now - self._last_log.get(rejection.reason, -_LOG_INTERVAL_S) >= _LOG_INTERVAL_S:
            self._last_log[rejection.reason] = now
            log.warning(
                "otlp_request_rejected", status=rejection.status, reason=rejection.reason, detail=rejection.message
            )


def _declared_length(request: Request) -> int:
    """The request's ``Content-Length``, -1 when it has none (or not a number)."""
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else -1


def _too_large(limit: int) -> _Rejection:
    return _Rejection(413, "too_large", f"request body exceeds {limit} bytes")


def _success(encoding: Encoding, result: DecodeResult) -> Response:
    message = "; ".join(result.errors)
    if encoding == "json":
        partial = {"rejectedSpans": str(result.rejected), "errorMessage": message}
        payload = {"partialSuccess": partial} if result.rejected or message else {}
        return Response(json.dumps(payload), 200, media_type=_CONTENT_TYPES["json"])
    response = ExportTraceServiceResponse()
    if result.rejected or message:
        response.partial_success.rejected_spans = result.rejected
        response.partial_success.error_message = message
    return Response(response.SerializeToString(), 200, media_type=_CONTENT_TYPES["protobuf"])


class _Inflater:
    """Incremental gzip/deflate decompression into one buffer that never expands past ``limit``.

    Output is produced :data:`INFLATE_STEP_BYTES` at a time (``zlib`` ``max_length``), and the
    cost of each step is reserved (through the ``reserve`` callback, which raises to refuse)
    before the step is taken, so a bomb never materialises beyond the limit or the budget.

    Raises:
        BodyTooLargeError: the output would exceed ``limit``.
        DecodeError: (``reason="gzip"``/``"deflate"``) corrupt or truncated input.
    """

    def __init__(self, coding: str, limit: int) -> None:
        self._coding = coding
        self._limit = limit
        self._obj: zlib._Decompress | None = None
        self._reserved = 0  # bytes of output reserved beyond what ``out`` holds

    def prepay(self, size: int) -> None:
        """Count ``size`` bytes of output as reserved already (on admission, before the first step)."""
        self._reserved += size

    @classmethod
    def for_encoding(cls, header: str, limit: int) -> _Inflater | None:
        """The inflater for a ``Content-Encoding`` value, ``None`` for identity.

        Raises:
            _Rejection: 415 for an unsupported encoding.
        """
        codings = [c.strip().lower() for c in header.split(",") if c.strip().lower() not in ("", "identity")]
        codings = ["gzip" if c == "x-gzip" else c for c in codings]
        if not codings:
            return None
        if len(codings) == 1 and codings[0] in ("gzip", "deflate"):
            return cls(codings[0], limit)
        raise _Rejection(415, "unsupported_media_type", f"unsupported Content-Encoding {header!r}: use gzip or deflate")

    def feed(self, data: bytes, out: bytearray, reserve: Callable[[int], None]) -> None:
        """Decompress one chunk of the body onto the end of ``out``.

        Args:
            data: the next compressed bytes.
            out: the decompressed body so far; extended in place.
            reserve: called with the cost of each output step before it is taken; raises to refuse.
        """
        try:
            while data:
                obj = self._obj = self._next_stream(data) if self._obj is None or self._obj.eof else self._obj
                data = self._drain(obj, data, out, reserve)
        except zlib.error as exc:
            raise DecodeError(self._coding, f"invalid {self._coding} body: {exc}") from exc

    def finish(self, out: bytearray, reserve: Callable[[int], None]) -> None:
        """Flush what the decompressor still holds and check that the compressed body was complete."""
        if self._obj is not None and not self._obj.eof:
            try:
                self._drain(self._obj, b"", out, reserve)
            except zlib.error as exc:
                raise DecodeError(self._coding, f"invalid {self._coding} body: {exc}") from exc
        if self._obj is not None and not self._obj.eof:
            raise DecodeError(self._coding, f"truncated {self._coding} body")

    def _drain(self, obj: zlib._Decompress, data: bytes, out: bytearray, reserve: Callable[[int], None]) -> bytes:
        """Inflate ``data`` step by step until it is consumed and no full step is pending; returns
        the input left over after the end of this stream (the next gzip member)."""
        while True:
            step = min(INFLATE_STEP_BYTES, self._limit - len(out) + 1)
            if self._reserved < step:
                reserve(intake_cost(step - self._reserved))
                self._reserved = step
            piece = obj.decompress(data, step)
            out += piece
            self._reserved -= len(piece)
            if len(out) > self._limit:
                raise BodyTooLargeError(self._limit)
            if obj.eof:
                return obj.unused_data
            data = obj.unconsumed_tail
            if not data and len(piece) < step:
                return b""

    def _next_stream(self, data: bytes) -> zlib._Decompress:
        if self._obj is not None and self._coding != "gzip":
            raise DecodeError(self._coding, "trailing data after the deflate stream")
        if self._coding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)  # one per gzip member
        zlib_header = (data[0] & 0x0F) == 8 and (data[0] >> 4) <= 7
        return zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)  # zlib or raw deflate
