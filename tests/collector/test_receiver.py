"""Tests for collector.receiver: OTLP/HTTP statuses, encodings, limits, auth and metrics."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from collector.errors import BodyTooLargeError
from collector.limits import IntakeBudget, intake_cost
from collector.metrics import CollectorMetrics
from collector.otlp import MAX_ATTRIBUTE_BYTES
from collector.receiver import INFLATE_STEP_BYTES, THREADPOOL_DECODE_BYTES, _Inflater, create_otlp_app
from collector.stream import InProcessStream
from tests.support.fixtures import closing_factory, served

LIMIT = 1024 * 1024
PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}


def _request(n_spans: int = 2, *, bad: int = 0, padding: int = 0) -> ExportTraceServiceRequest:
    """``n_spans`` valid spans of one trace plus ``bad`` spans with a zero trace id."""
    request = ExportTraceServiceRequest()
    ss = request.resource_spans.add().scope_spans.add()
    for i in range(n_spans + bad):
        sp = ss.spans.add(trace_id=bytes(16) if i >= n_spans else b"\x01" * 16, span_id=(i + 1).to_bytes(8, "big"))
        sp.name = "chat"
        if padding:
            sp.attributes.add(key="gen_ai.prompt").value.string_value = "x" * padding
    return request


def _two_traces(n_spans: int) -> ExportTraceServiceRequest:
    """``n_spans`` spans in each of two traces."""
    request = _request(n_spans)
    more = request.resource_spans[0].scope_spans[0].spans
    for i in range(n_spans):
        more.add(trace_id=b"\x02" * 16, span_id=(100 + i).to_bytes(8, "big"), name="chat")
    return request


def _json(n_spans: int = 2, *, bad: int = 0) -> bytes:
    spans = [{"traceId": "01" * 16, "spanId": f"{i + 1:016x}", "name": "chat"} for i in range(n_spans)]
    spans += [{"traceId": "00" * 16, "spanId": "01" * 8}] * bad
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


class Harness:
    """A receiver app on a fresh registry and stream, with a test client."""

    def __init__(
        self,
        *,
        max_batches: int = 100,
        token: str | None = None,
        token_check: Callable[[str], bool] | None = None,
        intake: IntakeBudget | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.metrics = CollectorMetrics(self.registry)
        self.stream = InProcessStream(max_batches, 1.0, self.metrics)
        app = create_otlp_app(
            self.stream,
            self.metrics,
            max_body_bytes=LIMIT,
            retry_after_s=3,
            ingest_token=token,
            token_check=token_check,
            intake=intake,
        )
        self.client = TestClient(app)
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}

    def post(self, body: Any, headers: dict[str, str]) -> Any:
        return self.client.post("/v1/traces", content=body, headers={**self.auth, **headers})

    def post_gzip_traced(self, body: bytes) -> tuple[Any, int]:
        """Post a gzipped protobuf body; the response and the peak of memory allocated meanwhile (tracemalloc)."""
        tracemalloc.start()
        try:
            response = self.post(body, {**PROTOBUF, "Content-Encoding": "gzip"})
            return response, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    def sample(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def requests(self, encoding: str, code: int) -> float | None:
        return self.sample("vigil_otlp_requests_total", encoding=encoding, code=str(code))

    def rejected(self, reason: str) -> float | None:
        return self.sample("vigil_otlp_rejected_requests_total", reason=reason)

    def assert_still_works(self) -> None:
        """A good request after a bad one is accepted."""
        before = self.stream.qsize()
        assert 200 == self.post(_request().SerializeToString(), PROTOBUF).status_code
        assert before + 1 == self.stream.qsize()


@pytest.fixture
def harness_factory() -> Iterator[Callable[..., Harness]]:
    """Builds Harness objects and closes their clients."""
    with closing_factory(Harness, lambda h: h.client.close()) as make:
        yield make


@pytest.fixture
def h(harness_factory: Callable[..., Harness]) -> Harness:
    """A default harness."""
    return harness_factory()


class TestSuccess:
    def test_protobuf(self, h: Harness) -> None:
        """A protobuf export is published and answered with an empty protobuf response."""
        response = h.post(_request(3).SerializeToString(), PROTOBUF)
        assert (200, "application/x-protobuf") == (response.status_code, response.headers["content-type"])
        assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
        (batch,) = h.stream.get_many(10, 0)
        assert 3 == len(batch.spans)
        assert 3.0 == h.sample("vigil_spans_received_total", encoding="protobuf")
        assert 1.0 == h.requests("protobuf", 200)

    def test_json_with_charset(self, h: Harness) -> None:
        """JSON with a charset parameter is accepted and answered in JSON."""
        response = h.post(_json(2), {"Content-Type": "application/json; charset=utf-8"})
        assert (200, {}) == (response.status_code, response.json())
        assert 2.0 == h.sample("vigil_spans_received_total", encoding="json")

    def test_partial_success_protobuf(self, h: Harness) -> None:
        """Rejected spans are reported in partial_success and counted as invalid_id."""
        response = h.post(_request(2, bad=3).SerializeToString(), PROTOBUF)
        partial = ExportTraceServiceResponse.FromString(response.content).partial_success
        assert (200, 3, "invalid trace_id: all zero") == (
            response.status_code,
            partial.rejected_spans,
            partial.error_message,
        )
        assert 3.0 == h.sample("vigil_spans_rejected_total", reason="invalid_id")
        assert 2.0 == h.sample("vigil_spans_received_total", encoding="protobuf")

    def test_partial_success_json(self, h: Harness) -> None:
        """JSON partial success uses camelCase keys and a string int64."""
        response = h.post(_json(1, bad=2), JSON)
        expected = {"partialSuccess": {"rejectedSpans": "2", "errorMessage": "invalid trace_id: all zero"}}
        assert (200, expected) == (response.status_code, response.json())

    def test_empty_request(self, h: Harness) -> None:
        """A request without spans succeeds and publishes nothing."""
        assert 200 == h.post(b"", PROTOBUF).status_code
        assert 200 == h.post(b"{}", JSON).status_code
        assert 0 == h.stream.qsize()

    @pytest.mark.parametrize(
        ("encoding", "compress"),
        [
            ("gzip", gzip.compress),
            ("deflate", zlib.compress),
            ("deflate", lambda b: zlib.compress(b, wbits=-15)),
            ("identity", lambda b: b),
        ],
    )
    def test_compression(self, h: Harness, encoding: str, compress: Callable[[bytes], bytes]) -> None:
        """gzip, zlib-wrapped and raw deflate, and identity bodies are accepted."""
        body = compress(_request(2).SerializeToString())
        assert 200 == h.post(body, {**PROTOBUF, "Content-Encoding": encoding}).status_code
        assert 1 == h.stream.qsize()

    def test_concatenated_gzip_members(self, h: Harness) -> None:
        """A gzip body made of several members is read whole."""
        raw = _request(2).SerializeToString()
        body = gzip.compress(raw[:10]) + gzip.compress(raw[10:])
        assert 200 == h.post(body, {**PROTOBUF, "Content-Encoding": "gzip"}).status_code
        assert 2 == len(h.stream.get_many(10, 0)[0].spans)

    def test_chunked_body(self, h: Harness) -> None:
        """A body sent with chunked transfer encoding (no Content-Length) is read as a stream."""
        body = gzip.compress(_request(5).SerializeToString())

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(body), 7):
                yield body[i : i + 7]

        assert 200 == h.post(chunks(), {**PROTOBUF, "Content-Encoding": "gzip"}).status_code
        assert 5 == len(h.stream.get_many(10, 0)[0].spans)

    def test_large_body_decoded_in_thread(self, h: Harness) -> None:
        """A body above the thread-pool threshold is decoded and accepted."""
        body = _request(40, padding=THREADPOOL_DECODE_BYTES // 30).SerializeToString()
        assert len(body) > THREADPOOL_DECODE_BYTES
        assert 200 == h.post(body, PROTOBUF).status_code
        assert 40.0 == h.sample("vigil_spans_received_total", encoding="protobuf")


class TestRejections:
    def test_unsupported_content_type(self, h: Harness) -> None:
        """An unknown Content-Type is 415 with a protobuf Status and is counted."""
        response = h.post(b"hello", {"Content-Type": "text/plain"})
        assert 415 == response.status_code
        assert "unsupported Content-Type 'text/plain'" in Status.FromString(response.content).message
        assert (1.0, 1.0) == (h.requests("other", 415), h.rejected("unsupported_media_type"))
        h.assert_still_works()

    def test_unsupported_content_encoding(self, h: Harness) -> None:
        """An unknown Content-Encoding is 415, in JSON for a JSON request."""
        response = h.post(_json(), {**JSON, "Content-Encoding": "br"})
        assert (415, 3) == (response.status_code, response.json()["code"])
        assert "Content-Encoding" in response.json()["message"]
        assert 1.0 == h.rejected("unsupported_media_type")
        h.assert_still_works()

    def test_raw_body_too_large(self, h: Harness) -> None:
        """A body over the limit is 413, with or without a Content-Length header."""
        body = _request(1, padding=LIMIT).SerializeToString()
        assert 413 == h.post(body, PROTOBUF).status_code
        assert 413 == h.post(iter([body[:LIMIT], body[LIMIT:]]), PROTOBUF).status_code
        assert (2.0, 2.0) == (h.requests("protobuf", 413), h.rejected("too_large"))
        h.assert_still_works()

    def test_gzip_bomb(self, h: Harness) -> None:
        """100 MiB of gzipped zeros is refused with 413 without being expanded in memory."""
        bomb = _bomb(100)
        assert len(bomb) < LIMIT
        response, peak = h.post_gzip_traced(bomb)
        assert 413 == response.status_code
        assert peak < 16 * LIMIT
        assert "exceeds" in Status.FromString(response.content).message
        assert 1.0 == h.rejected("too_large")
        h.assert_still_works()

    @pytest.mark.parametrize("body", [b"\xff\xff\xff\xff", b"\x0a\x80\x01garbage"])
    def test_garbage_protobuf(self, h: Harness, body: bytes) -> None:
        """An unparseable protobuf body is 400 with a message, counted as decode."""
        response = h.post(body, PROTOBUF)
        assert 400 == response.status_code
        assert "invalid OTLP protobuf body" in Status.FromString(response.content).message
        assert (1.0, 1.0) == (h.requests("protobuf", 400), h.rejected("decode"))
        h.assert_still_works()

    def test_truncated_protobuf(self, h: Harness) -> None:
        """A truncated protobuf body is 400."""
        body = _request(3).SerializeToString()
        assert 400 == h.post(body[:-5], PROTOBUF).status_code
        h.assert_still_works()

    def test_invalid_json(self, h: Harness) -> None:
        """Invalid JSON is 400 with a JSON error body."""
        response = h.post(b'{"resourceSpans": [', JSON)
        assert (400, 3) == (response.status_code, response.json()["code"])
        assert "invalid JSON body" in response.json()["message"]
        assert (1.0, 1.0) == (h.requests("json", 400), h.rejected("decode"))
        h.assert_still_works()

    @pytest.mark.parametrize(
        "body",
        [
            b"\x1f\x8b\x08\x00garbage-not-gzip",
            gzip.compress(b"x" * 1000)[:-20],
            b"plain, not compressed",
        ],
    )
    def test_bad_gzip(self, h: Harness, body: bytes) -> None:
        """Corrupt, truncated or uncompressed gzip bodies are 400."""
        response = h.post(body, {**PROTOBUF, "Content-Encoding": "gzip"})
        assert 400 == response.status_code
        assert "gzip" in Status.FromString(response.content).message
        assert 1.0 == h.rejected("decode")
        h.assert_still_works()

    def test_no_room_for_every_trace(self, harness_factory: Callable[..., Harness]) -> None:
        """A stream with room for fewer traces than the request holds: 503 with Retry-After after
        decoding; nothing of the request is taken and its spans are counted."""
        h = harness_factory(max_batches=2)
        assert 200 == h.post(_request(1).SerializeToString(), PROTOBUF).status_code
        response = h.post(_two_traces(3).SerializeToString(), PROTOBUF)
        assert (503, "3") == (response.status_code, response.headers["retry-after"])
        assert "retry later" in Status.FromString(response.content).message
        assert 1 == h.stream.qsize()
        assert 6.0 == h.sample("vigil_spans_rejected_total", reason="backpressure")
        assert 6.0 == h.sample("vigil_refused_total", stage="stream", reason="full")
        assert (1.0, 1.0) == (h.requests("protobuf", 503), h.rejected("backpressure"))
        h.stream.get_many(10, 0)
        h.assert_still_works()

    @pytest.mark.parametrize("media", [PROTOBUF, JSON])
    def test_full_stream_refuses_before_decoding(
        self, harness_factory: Callable[..., Harness], media: dict[str, str]
    ) -> None:
        """A stream at capacity: 503 + Retry-After without reading the body (an undecodable body
        is refused as 503, not 400); counted as a backpressure request, spans unknown."""
        h = harness_factory(max_batches=1)
        assert 200 == h.post(_request(1).SerializeToString(), PROTOBUF).status_code
        response = h.post(b"\x0a\xff\xff garbage", media)
        assert (503, "3") == (response.status_code, response.headers["retry-after"])
        assert (1, 1.0, 0.0) == (
            h.stream.qsize(),
            h.rejected("backpressure"),
            h.sample("vigil_spans_rejected_total", reason="backpressure"),
        )
        too_large = h.post(b"x" * (LIMIT + 1), media)
        assert 413 == too_large.status_code  # final, so it wins over a 503 that would be retried
        h.stream.get_many(10, 0)
        assert 400 == h.post(b"\x0a\xff\xff garbage", media).status_code  # with room, it is decoded
        h.assert_still_works()

    def test_ingest_token(self, harness_factory: Callable[..., Harness]) -> None:
        """With an ingest token, a missing or wrong bearer token is 401; the right one is accepted."""
        h = harness_factory(token="s3cret")
        body = _request().SerializeToString()
        missing = h.client.post("/v1/traces", content=body, headers=PROTOBUF)
        wrong = h.client.post("/v1/traces", content=body, headers={**PROTOBUF, "Authorization": "Bearer nope"})
        assert (401, 401, "Bearer") == (missing.status_code, wrong.status_code, missing.headers["www-authenticate"])
        assert 2.0 == h.rejected("unauthorized")
        assert 0 == h.stream.qsize()
        h.assert_still_works()

    def test_token_check(self, harness_factory: Callable[..., Harness]) -> None:
        """An injected check admits stored tokens next to the static one; everything else is 401."""
        h = harness_factory(token="s3cret", token_check=lambda secret: secret == "stored-ingest")
        body = _request().SerializeToString()
        codes = [
            h.client.post("/v1/traces", content=body, headers={**PROTOBUF, "Authorization": auth}).status_code
            for auth in ("Bearer stored-ingest", "Bearer s3cret", "Bearer other", "Basic stored-ingest", "Bearer ")
        ]
        assert [200, 200, 401, 401, 401] == codes
        assert 2 == h.stream.qsize()

    def test_token_check_alone_requires_a_token(self, harness_factory: Callable[..., Harness]) -> None:
        """With only a check (no static token) a request without a token is refused."""
        h = harness_factory(token_check=lambda secret: secret == "stored-ingest")
        body = _request().SerializeToString()
        assert 401 == h.client.post("/v1/traces", content=body, headers=PROTOBUF).status_code
        ok = h.client.post("/v1/traces", content=body, headers={**PROTOBUF, "Authorization": "Bearer stored-ingest"})
        assert 200 == ok.status_code

    def test_wrong_method(self, h: Harness) -> None:
        """GET on the export path is not allowed."""
        assert 405 == h.client.get("/v1/traces").status_code


class TestProbes:
    def test_healthz(self, h: Harness) -> None:
        """/healthz answers ok."""
        response = h.client.get("/healthz")
        assert (200, {"status": "ok"}) == (response.status_code, response.json())

    def test_readyz_follows_stream(self, h: Harness) -> None:
        """/readyz is 200 while the stream is open and 503 once it is closed."""
        assert 200 == h.client.get("/readyz").status_code
        h.stream.close()
        assert 503 == h.client.get("/readyz").status_code


@pytest.fixture
def live_server(h: Harness) -> Iterator[str]:
    """The harness app served by uvicorn on a free loopback port; yields the base URL."""
    with served(h.client.app, lifespan="off") as url:
        yield url


class TestRealExporter:
    @pytest.mark.parametrize("compression", [Compression.Gzip, Compression.Deflate, Compression.NoCompression])
    def test_sdk_http_exporter(self, h: Harness, live_server: str, compression: Compression) -> None:
        """The OTel SDK's OTLP/HTTP exporter delivers spans over a real socket with each compression."""
        exporter = OTLPSpanExporter(endpoint=f"{live_server}/v1/traces", compression=compression, timeout=10)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("vigil.tests")
        with tracer.start_as_current_span("invoke_agent a"), tracer.start_as_current_span("chat m"):
            pass
        provider.shutdown()
        batches = h.stream.get_many(10, 1.0)
        assert ["chat m", "invoke_agent a"] == [s.name for b in batches for s in b.spans]
        assert 2.0 == h.requests("protobuf", 200)  # SimpleSpanProcessor: one request per span


def _bomb(mib: int) -> bytes:
    """``mib`` MiB of zeros, gzipped (about 1,000 times smaller)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1024 * 1024)
    return b"".join(packer.compress(block) for _ in range(mib)) + packer.flush()


class TestIntakeBudget:
    """Bodies reserve their cost (:func:`collector.limits.intake_cost`) before they are held."""

    def test_plain_body_refused_before_it_is_read(self, harness_factory: Callable[..., Harness]) -> None:
        """With another body holding part of the budget, a plain body whose declared size does not
        fit is 503 + Retry-After (``intake_budget``) and nothing reaches the stream; once the other is
        released the same body is accepted, and nothing stays reserved."""
        body = _request(20).SerializeToString()
        intake = IntakeBudget(intake_cost(len(body)) + 10)
        h = harness_factory(intake=intake)
        other = intake.reservation()
        assert other.grow(20)
        response = h.post(body, PROTOBUF)
        assert (503, "3") == (response.status_code, response.headers["Retry-After"])
        assert "intake budget" in Status.FromString(response.content).message
        assert (1.0, 1.0, 0) == (h.rejected("intake_budget"), h.requests("protobuf", 503), h.stream.qsize())
        assert 20 == intake.reserved
        other.release()
        assert 200 == h.post(body, PROTOBUF).status_code
        assert (1, 0) == (h.stream.qsize(), intake.reserved)

    def test_gzip_bomb_refused_within_the_budget(self, harness_factory: Callable[..., Harness]) -> None:
        """A gzip bomb reserves ten times its compressed size (at most the size limit) before it is
        read: with another body in flight that does not fit, so it waits for room and is refused
        with 503, having held at most the budget, not its 100 MiB (the 413 at the size limit applies
        when it is alone: see test_gzip_bomb)."""
        budget = LIMIT  # about 300 KiB of output at the cost factor: refused before the 1 MiB size limit
        intake = IntakeBudget(budget)
        h = harness_factory(intake=intake)
        other = intake.reservation()
        assert other.grow(1)
        bomb = _bomb(100)
        response, peak = h.post_gzip_traced(bomb)
        assert (503, "3") == (response.status_code, response.headers["Retry-After"])
        assert peak < len(bomb) * 4 + budget  # the compressed body (sent by the test client) and the budget
        assert 1.0 == h.rejected("intake_budget")
        assert 1 == intake.reserved
        other.release()
        h.assert_still_works()
        assert 0 == intake.reserved

    def test_gzip_body_inflating_past_its_estimate_refused_on_the_way(
        self, harness_factory: Callable[..., Harness]
    ) -> None:
        """A 10 MiB bomb (about 10 KiB gzipped) fits its admission estimate (ten times the compressed
        size), then inflates past it: with another body in flight the next step does not fit, so it is
        refused with 503 having held about the budget, and gives everything back."""
        budget = LIMIT
        intake = IntakeBudget(budget)
        h = harness_factory(intake=intake)
        other = intake.reservation()
        assert other.grow(1)
        bomb = _bomb(10)
        assert intake_cost(10 * len(bomb)) < budget  # admitted at once
        response, peak = h.post_gzip_traced(bomb)
        assert (503, "3") == (response.status_code, response.headers["Retry-After"])
        assert peak < len(bomb) * 4 + budget
        assert (1.0, 1) == (h.rejected("intake_budget"), intake.reserved)
        other.release()
        h.assert_still_works()
        assert 0 == intake.reserved

    def test_reservation_released_after_every_answer(self, harness_factory: Callable[..., Harness]) -> None:
        """200, 400, 413, 415, gzip, chunked: the budget is whole again after each."""
        intake = IntakeBudget(64 * LIMIT)
        h = harness_factory(intake=intake)
        good = _request(3).SerializeToString()
        cases = [
            (200, good, PROTOBUF),
            (200, gzip.compress(good), {**PROTOBUF, "Content-Encoding": "gzip"}),
            (200, iter([good[:10], good[10:]]), PROTOBUF),
            (400, b"\xff\xff\xff\xff", PROTOBUF),
            (400, gzip.compress(good)[:-9], {**PROTOBUF, "Content-Encoding": "gzip"}),
            (413, _bomb(4), {**PROTOBUF, "Content-Encoding": "gzip"}),
            (415, good, {**PROTOBUF, "Content-Encoding": "br"}),
        ]
        for status, body, headers in cases:
            assert status == h.post(body, headers).status_code
            assert 0 == intake.reserved, status

    def test_oversized_body_accepted_when_alone(self, harness_factory: Callable[..., Harness]) -> None:
        """A body costing more than the whole budget is accepted while nothing else is in flight."""
        h = harness_factory(intake=IntakeBudget(16))
        body = gzip.compress(_request(5).SerializeToString())
        assert 200 == h.post(body, {**PROTOBUF, "Content-Encoding": "gzip"}).status_code
        assert 1 == h.stream.qsize()


class TestInflater:
    """The bounded incremental inflate: output in steps, each reserved before it is taken."""

    def _inflate(self, body: bytes, limit: int, chunk: int = 65536) -> tuple[bytearray, list[tuple[int, int]]]:
        out = bytearray()
        calls: list[tuple[int, int]] = []  # (bytes held when asked, bytes asked)
        inflater = _Inflater("gzip", limit)
        for i in range(0, len(body), chunk):
            inflater.feed(body[i : i + chunk], out, lambda n: calls.append((len(out), n)))
        inflater.finish(out, lambda n: calls.append((len(out), n)))
        return out, calls

    def test_every_output_byte_is_reserved_before_it_is_held(self) -> None:
        """Reservations run ahead of the output by at most one step; the result is exact."""
        data = bytes(range(256)) * 40_000 + bytes(3_000_000)  # 13 MB, compressible, odd sizes
        out, calls = self._inflate(gzip.compress(data), 64 * 2**20)
        assert data == bytes(out)
        reserved = 0
        for held, asked in calls:
            assert held <= reserved / 3.5
            reserved += asked
        assert len(out) <= reserved / 3.5 <= len(out) + INFLATE_STEP_BYTES

    def test_bomb_never_materialises_past_the_limit(self) -> None:
        """100 MiB of zeros against a 1 MiB limit: BodyTooLargeError with at most limit + 1 bytes held."""
        out = bytearray()
        inflater = _Inflater("gzip", LIMIT)
        with pytest.raises(BodyTooLargeError):
            inflater.feed(_bomb(100), out, lambda n: None)
        assert len(out) <= LIMIT + 1

    def test_concatenated_members_and_pending_output(self) -> None:
        """Two gzip members fed one byte at a time inflate to both; output pending after the last
        input byte is drained."""
        a, b = bytes(3 * INFLATE_STEP_BYTES), b"tail" * 1000
        out, _ = self._inflate(gzip.compress(a) + gzip.compress(b), 64 * 2**20, chunk=1)
        assert a + b == bytes(out)

    def test_refusal_stops_the_inflate(self) -> None:
        """A reserve callback that raises stops inflating at once: nothing beyond what was granted."""
        granted: list[int] = []

        def reserve(n: int) -> None:
            if granted:
                raise RuntimeError("budget spent")
            granted.append(n)

        out = bytearray()
        with pytest.raises(RuntimeError):
            _Inflater("gzip", 64 * 2**20).feed(_bomb(10), out, reserve)
        assert len(out) <= INFLATE_STEP_BYTES


def test_long_attribute_values_cut_and_counted(h: Harness) -> None:
    """A value over MAX_ATTRIBUTE_BYTES reaches the stream cut to it, counted in
    ``vigil_attribute_values_truncated_total``."""
    request = _request(1)
    attribute = request.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="gen_ai.prompt")
    attribute.value.string_value = "p" * (MAX_ATTRIBUTE_BYTES + 1)
    assert 200 == h.post(request.SerializeToString(), PROTOBUF).status_code
    (batch,) = h.stream.get_many(10, 0)
    assert "p" * MAX_ATTRIBUTE_BYTES == batch.spans[0].attributes["gen_ai.prompt"]
    assert 1.0 == h.sample("vigil_attribute_values_truncated_total")
