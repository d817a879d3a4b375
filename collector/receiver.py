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
  in ``vigil_otlp_rejected_requests_total{reason="backpressure"}`` (their spans are unknown).

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

from collector.errors import BackpressureError, BodyTooLargeError, DecodeError
from collector.metrics import CollectorMetrics, Encoding, RejectReason
from collector.model import DecodeResult
from collector.otlp import decode_json, decode_protobuf
from collector.stream import BodyPublisher, Publisher, check_room

__all__ = ["THREADPOOL_DECODE_BYTES", "create_otlp_app"]

log = structlog.get_logger(__name__)

THREADPOOL_DECODE_BYTES = 256 * 1024
"""Bodies at least this large are decoded in a worker thread, off the event loop."""

_MEDIA_TYPES: dict[str, Encoding] = {"application/x-protobuf": "protobuf", "application/json": "json"}
_CONTENT_TYPES = {"protobuf": "application/x-protobuf", "json": "application/json"}
_DECODERS: dict[str, Callable[[bytes], DecodeResult]] = {"protobuf": decode_protobuf, "json": decode_json}
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

    Returns:
        A Starlette app. Handlers never block the event loop on large decodes.
    """
    receiver = _Receiver(publisher, metrics, max_body_bytes, retry_after_s, ingest_token, token_check=token_check)
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
    ) -> None:
        self._publisher = publisher
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
        self._metrics.received(encoding, result.accepted, size)
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
        body = await self._read_body(request)
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

    def _authorize(self, request: Request) -> None:
        if self._token is None and self._check is None:
            return
        given = request.headers.get("authorization", "").encode()
        if not bearer_accepted(given, self._token, self._check):
            rejection = _Rejection(401, "unauthorized", "missing or invalid bearer token")
            rejection.headers["WWW-Authenticate"] = "Bearer"
            raise rejection

    async def _read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._limit:
            raise _too_large(self._limit)
        inflater = _Inflater.for_encoding(request.headers.get("content-encoding", ""), self._limit)
        chunks: list[bytes] = []
        raw = 0
        try:
            async for chunk in request.stream():
                raw += len(chunk)
                if raw > self._limit:
                    raise _too_large(self._limit)
                chunks.append(inflater.feed(chunk) if inflater else chunk)
            if inflater:
                inflater.finish()
        except BodyTooLargeError as exc:
            raise _too_large(exc.limit) from exc
        except DecodeError as exc:
            raise _Rejection(400, "decode", str(exc)) from exc
        return b"".join(chunks)

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

    async def _publish(self, result: DecodeResult, body: bytes, encoding: Encoding) -> None:
        if not result.batches:
            return
        try:
            if isinstance(self._publisher, BodyPublisher):  # spooled: answered once the body is on disk
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
    """Incremental gzip/deflate decompression that never expands past ``limit`` bytes.

    Raises:
        BodyTooLargeError: the output would exceed ``limit``.
        DecodeError: (``reason="gzip"``/``"deflate"``) corrupt or truncated input.
    """

    def __init__(self, coding: str, limit: int) -> None:
        self._coding = coding
        self._limit = limit
        self._size = 0
        self._obj: zlib._Decompress | None = None

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

    def feed(self, data: bytes) -> bytes:
        """Decompress one chunk of the body; returns what it expands to."""
        out: list[bytes] = []
        try:
            while data:
                obj = self._obj = self._next_stream(data) if self._obj is None or self._obj.eof else self._obj
                piece = obj.decompress(data, self._limit - self._size + 1)
                self._size += len(piece)
                if self._size > self._limit:
                    raise BodyTooLargeError(self._limit)
                out.append(piece)
                data = obj.unused_data if obj.eof else b""
        except zlib.error as exc:
            raise DecodeError(self._coding, f"invalid {self._coding} body: {exc}") from exc
        return b"".join(out)

    def finish(self) -> None:
        """Check that the compressed body was complete."""
        if self._obj is not None and not self._obj.eof:
            raise DecodeError(self._coding, f"truncated {self._coding} body")

    def _next_stream(self, data: bytes) -> zlib._Decompress:
        if self._obj is not None and self._coding != "gzip":
            raise DecodeError(self._coding, "trailing data after the deflate stream")
        if self._coding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)  # one per gzip member
        zlib_header = (data[0] & 0x0F) == 8 and (data[0] >> 4) <= 7
        return zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)  # zlib or raw deflate
