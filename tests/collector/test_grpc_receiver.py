"""Tests for collector.grpc_receiver: OTLP/gRPC statuses, gzip, limits, auth, RetryInfo and metrics."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from prometheus_client import CollectorRegistry

from collector.errors import ListenError
from collector.grpc_receiver import (
    ADMISSION_WAIT_S,
    EXPORT_METHOD,
    MAX_WAITING,
    RETRY_INFO_KEY,
    STATUS_DETAILS_KEY,
    concurrent_reads,
    create_grpc_server,
    grpc_read_cost,
    receive_limit,
)
from collector.limits import IntakeBudget, intake_budget_bytes, intake_cost
from collector.metrics import CollectorMetrics
from collector.receiver import THREADPOOL_DECODE_BYTES
from collector.stream import InProcessStream
from tests.support.fixtures import closing_factory

LIMIT = 1024 * 1024
TIMEOUT_S = 10.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _request(n_spans: int = 2, *, bad: int = 0, padding: int = 0, trace: int = 1) -> ExportTraceServiceRequest:
    """``n_spans`` valid spans of one trace plus ``bad`` spans with a zero trace id."""
    request = ExportTraceServiceRequest()
    ss = request.resource_spans.add().scope_spans.add()
    for i in range(n_spans + bad):
        trace_id = bytes(16) if i >= n_spans else bytes([trace]) * 16
        sp = ss.spans.add(trace_id=trace_id, span_id=(i + 1).to_bytes(8, "big"), name="chat")
        if padding:
            sp.attributes.add(key="gen_ai.prompt").value.string_value = "x" * padding
    return request


def _status_retry_delay(error: grpc.RpcError) -> int:
    """The ``RetryInfo`` delay as grpc-go's ``status.FromError(err).Details()`` reads it (what the Go
    exporter's ``throttleDelay`` uses): the ``google.rpc.Status`` in ``grpc-status-details-bin``, of
    the call's own code and message, with the ``RetryInfo`` packed in its details."""
    status = Status.FromString(dict(error.trailing_metadata())[STATUS_DETAILS_KEY])
    assert (error.code().value[0], error.details()) == (status.code, status.message)
    infos = [RetryInfo() for d in status.details if d.Is(RetryInfo.DESCRIPTOR)]
    assert 1 == len(infos)
    assert next(d for d in status.details if d.Is(RetryInfo.DESCRIPTOR)).Unpack(infos[0])
    return int(infos[0].retry_delay.seconds)


class Harness:
    """A started gRPC receiver on its own event-loop thread, a fresh registry and stream, and a client."""

    def __init__(
        self,
        *,
        max_batches: int = 100,
        token: str | None = None,
        token_check: Callable[[str], bool] | None = None,
        intake: IntakeBudget | None = None,
        max_message_bytes: int = LIMIT,
        admission_wait_s: float = ADMISSION_WAIT_S,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self._options: dict[str, Any] = {  # passed on to create_grpc_server
            "token_check": token_check,
            "intake": intake,
            "max_message_bytes": max_message_bytes,
            "admission_wait_s": admission_wait_s,
            "max_waiting": max_waiting,
        }
        self.registry = CollectorRegistry()
        self.metrics = CollectorMetrics(self.registry)
        self.stream = InProcessStream(max_batches, 1.0, self.metrics)
        self.port = _free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.server = self._run(self._start(token))
        self.channel = grpc.insecure_channel(self.target)
        self.stub = TraceServiceStub(self.channel)
        self.raw = self.channel.unary_unary(EXPORT_METHOD)  # bytes in, bytes out
        self.auth = (("authorization", f"Bearer {token}"),) if token else ()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(TIMEOUT_S)

    async def _start(self, token: str | None) -> grpc.aio.Server:
        server = await create_grpc_server(
            self.stream,
            self.metrics,
            host="127.0.0.1",
            port=self.port,
            retry_after_s=3,
            ingest_token=token,
            **self._options,
        )
        await server.start()
        return server

    def export(self, request: ExportTraceServiceRequest, **kwargs: Any) -> ExportTraceServiceResponse:
        kwargs.setdefault("metadata", self.auth)
        return self.stub.Export(request, timeout=TIMEOUT_S, **kwargs)

    def export_error(self, payload: bytes, **kwargs: Any) -> grpc.RpcError:
        """Send raw ``payload``; returns the error the call must end with."""
        kwargs.setdefault("metadata", self.auth)
        with pytest.raises(grpc.RpcError) as info:
            self.raw(payload, timeout=TIMEOUT_S, **kwargs)
        return info.value

    def sample(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def requests(self, code: int) -> float | None:
        return self.sample("vigil_otlp_requests_total", encoding="grpc", code=str(code))

    def rejected(self, reason: str) -> float | None:
        return self.sample("vigil_otlp_rejected_requests_total", reason=reason)

    def assert_still_works(self) -> None:
        """A good request after a bad one is accepted."""
        before = self.stream.qsize()
        assert not self.export(_request(trace=9)).HasField("partial_success")
        assert before + 1 == self.stream.qsize()

    def close(self) -> None:
        self.channel.close()
        self._run(self.server.stop(None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(TIMEOUT_S)
        self._loop.close()


@pytest.fixture
def harness_factory() -> Iterator[Callable[..., Harness]]:
    """Builds Harness objects and stops their servers."""
    with closing_factory(Harness, Harness.close) as make:
        yield make


@pytest.fixture
def h(harness_factory: Callable[..., Harness]) -> Harness:
    """A default harness."""
    return harness_factory()


class TestSuccess:
    def test_stub_export(self, h: Harness) -> None:
        """A generated-stub export is published, answered without partial_success, and counted."""
        response = h.export(_request(3))
        assert not response.HasField("partial_success")
        (batch,) = h.stream.get_many(10, 0)
        assert 3 == len(batch.spans)
        assert (3.0, 1.0) == (h.sample("vigil_spans_received_total", encoding="grpc"), h.requests(200))

    def test_gzip(self, h: Harness) -> None:
        """A gzip-compressed message is decompressed by gRPC and accepted."""
        h.export(_request(4), compression=grpc.Compression.Gzip)
        assert 4 == len(h.stream.get_many(10, 0)[0].spans)

    def test_partial_success(self, h: Harness) -> None:
        """Rejected spans are reported in partial_success and counted as invalid_id."""
        partial = h.export(_request(2, bad=3)).partial_success
        assert (3, "invalid trace_id: all zero") == (partial.rejected_spans, partial.error_message)
        assert 3.0 == h.sample("vigil_spans_rejected_total", reason="invalid_id")
        assert 2.0 == h.sample("vigil_spans_received_total", encoding="grpc")

    def test_empty_request(self, h: Harness) -> None:
        """A request without spans succeeds and publishes nothing."""
        assert not h.export(ExportTraceServiceRequest()).HasField("partial_success")
        assert 0 == h.stream.qsize()

    def test_large_message_decoded_in_thread(self, h: Harness) -> None:
        """A message above the thread-pool threshold is decoded and accepted."""
        request = _request(40, padding=THREADPOOL_DECODE_BYTES // 30)
        assert request.ByteSize() > THREADPOOL_DECODE_BYTES
        h.export(request)
        assert 40.0 == h.sample("vigil_spans_received_total", encoding="grpc")

    def test_sdk_exporter(self, h: Harness) -> None:
        """The OTel SDK gRPC exporter (insecure, gzip) lands its spans with their attributes."""
        exporter = OTLPSpanExporter(endpoint=h.target, insecure=True, compression=grpc.Compression.Gzip)
        provider = TracerProvider(resource=Resource.create({"service.name": "grpc-agent"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("test")
        with (
            tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.agent.name": "a"}),
            tracer.start_as_current_span("chat m"),
        ):
            pass
        provider.shutdown()
        spans = [s for batch in h.stream.get_many(10, 0) for s in batch.spans]  # one export per span
        assert ["chat m", "invoke_agent a"] == sorted(s.name for s in spans)
        root = next(s for s in spans if not s.parent_span_id)
        assert ("a", "grpc-agent") == (root.attributes["gen_ai.agent.name"], root.resource["service.name"])


class TestRejections:
    def test_garbage_is_invalid_argument(self, h: Harness) -> None:
        """Undecodable bytes are INVALID_ARGUMENT with a message, counted as decode."""
        error = h.export_error(b"\x0a\xff\xff\xff\x0f garbage")
        assert grpc.StatusCode.INVALID_ARGUMENT == error.code()
        assert "invalid OTLP protobuf body" in error.details()
        assert (1.0, 1.0) == (h.rejected("decode"), h.requests(400))
        h.assert_still_works()

    def test_full_stream_is_unavailable_with_retry_info(self, harness_factory: Callable[..., Harness]) -> None:
        """A full stream answers UNAVAILABLE with a RetryInfo trailer of the configured delay, before
        decoding (an undecodable message is UNAVAILABLE too, and no spans are counted)."""
        h = harness_factory(max_batches=1)
        h.export(_request(trace=1))
        for body in (_request(2, trace=2).SerializeToString(), b"\x0a\xff\xff\xff\x0f garbage"):
            error = h.export_error(body)
            assert grpc.StatusCode.UNAVAILABLE == error.code()
            info = RetryInfo.FromString(dict(error.trailing_metadata())[RETRY_INFO_KEY])
            assert (3, 0) == (info.retry_delay.seconds, info.retry_delay.nanos)
            assert 3 == _status_retry_delay(error)
        assert (2.0, 0.0, 2.0) == (
            h.rejected("backpressure"),
            h.sample("vigil_spans_rejected_total", reason="backpressure"),
            h.requests(503),
        )
        assert 1 == h.stream.qsize()
        h.stream.get_many(10, 0)
        h.assert_still_works()

    def test_spent_intake_budget_is_unavailable_with_retry_info(self, harness_factory: Callable[..., Harness]) -> None:
        """A message whose cost does not fit in the intake budget (another body holds it) is
        UNAVAILABLE + RetryInfo before decoding, counted ``intake_budget``; the budget is all given
        back after every answer, and the same message passes once the other body is released."""
        body = _request(50, trace=3).SerializeToString()
        intake = IntakeBudget(intake_cost(len(body)) + 10)
        h = harness_factory(intake=intake, admission_wait_s=0.2)
        other = intake.reservation()
        assert other.grow(20)
        error = h.export_error(body)
        assert grpc.StatusCode.UNAVAILABLE == error.code()
        info = RetryInfo.FromString(dict(error.trailing_metadata())[RETRY_INFO_KEY])
        assert 3 == info.retry_delay.seconds
        assert 3 == _status_retry_delay(error)
        assert "intake budget" in (error.details() or "")
        assert (1.0, 1.0, 0) == (h.rejected("intake_budget"), h.requests(503), h.stream.qsize())
        assert 20 == intake.reserved
        other.release()
        assert not h.raw(body, timeout=TIMEOUT_S)  # an empty ExportTraceServiceResponse: full success
        assert (1, 0) == (h.stream.qsize(), intake.reserved)

    def test_sdk_exporter_honours_retry_info(self, harness_factory: Callable[..., Harness]) -> None:
        """The SDK exporter gets UNAVAILABLE, waits the 3 s RetryInfo delay and succeeds once there is room."""
        h = harness_factory(max_batches=1)
        h.export(_request(1, trace=1))
        timer = threading.Timer(0.5, h.stream.get_many, (10, 0))
        timer.start()
        exporter = OTLPSpanExporter(endpoint=h.target, insecure=True, timeout=TIMEOUT_S)
        with TracerProvider().get_tracer("test").start_as_current_span("invoke_agent") as span:
            pass
        started = time.monotonic()
        assert SpanExportResult.SUCCESS == exporter.export([span])
        elapsed = time.monotonic() - started
        timer.join()
        assert 2.9 <= elapsed < TIMEOUT_S  # without RetryInfo the first backoff is 0.8-1.2 s
        assert (1.0, 2.0) == (h.requests(503), h.sample("vigil_spans_received_total", encoding="grpc"))

    def test_token_required(self, harness_factory: Callable[..., Harness]) -> None:
        """With an ingest token, calls without it or with a wrong one are UNAUTHENTICATED."""
        h = harness_factory(token="s3cret")
        payload = _request().SerializeToString()
        missing = h.export_error(payload, metadata=())
        wrong = h.export_error(payload, metadata=(("authorization", "Bearer nope"),))
        assert [grpc.StatusCode.UNAUTHENTICATED] * 2 == [missing.code(), wrong.code()]
        assert (2.0, 2.0) == (h.rejected("unauthorized"), h.requests(401))
        assert 0 == h.stream.qsize()
        h.assert_still_works()

    def test_token_check(self, harness_factory: Callable[..., Harness]) -> None:
        """An injected check admits stored tokens; others are UNAUTHENTICATED."""
        h = harness_factory(token_check=lambda secret: secret == "stored-ingest")
        payload = _request().SerializeToString()
        wrong = h.export_error(payload, metadata=(("authorization", "Bearer nope"),))
        assert grpc.StatusCode.UNAUTHENTICATED == wrong.code()
        h.export(_request(), metadata=(("authorization", "Bearer stored-ingest"),))
        assert 1 == h.stream.qsize()

    @pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip])
    def test_oversized_is_resource_exhausted(self, h: Harness, compression: grpc.Compression) -> None:
        """A message over the limit, raw or after gzip decompression, is RESOURCE_EXHAUSTED."""
        payload = _request(4, padding=LIMIT // 3).SerializeToString()
        assert len(payload) > LIMIT
        error = h.export_error(payload, compression=compression)
        assert grpc.StatusCode.RESOURCE_EXHAUSTED == error.code()
        assert 0 == h.stream.qsize()
        assert 1.0 == h.sample("vigil_otlp_rejected_requests_total", reason="too_large")
        assert 1.0 == h.sample("vigil_otlp_requests_total", encoding="grpc", code="413")
        h.assert_still_works()


MIB = 1024 * 1024


class TestAdmission:
    """A call reserves the worst case of receiving its message before it is read (module docstring)."""

    def test_cap_arithmetic(self) -> None:
        """The read cost is twice the library's receive limit; it covers the intake cost of any message
        within the limit; the budgets of the 512 MiB and default 1,024 MiB limits admit 1 and 3 reads of
        20 MiB messages at once; a budget smaller than one read still admits one; none is no cap."""
        assert 40 * MIB == receive_limit(20 * MIB)
        assert 2**31 - 1 == receive_limit(2**31)
        assert 80 * MIB == grpc_read_cost(20 * MIB)
        for size in (1, 1000, MIB, 20 * MIB, 300 * MIB):
            assert intake_cost(size) <= grpc_read_cost(size)
        assert 1 == concurrent_reads(intake_budget_bytes(512 * MIB), 20 * MIB)  # 128 MiB // 80 MiB
        assert 3 == concurrent_reads(intake_budget_bytes(1024 * MIB), 20 * MIB)  # 256 MiB // 80 MiB
        assert 1 == concurrent_reads(1, 20 * MIB)
        assert 0 == concurrent_reads(0, 20 * MIB)

    def test_lone_call_passes_a_budget_smaller_than_its_read_cost(
        self, harness_factory: Callable[..., Harness]
    ) -> None:
        """With nothing else in flight a call is admitted even though its read cost exceeds the budget."""
        intake = IntakeBudget(1024)
        h = harness_factory(intake=intake, admission_wait_s=0.0)
        assert grpc_read_cost(LIMIT) > intake.budget_bytes
        h.export(_request(3))
        assert (1, 0, 0.0) == (h.stream.qsize(), intake.reserved, h.rejected("intake_budget"))

    def test_waiting_call_is_admitted_once_room_is_given_back(self, harness_factory: Callable[..., Harness]) -> None:
        """A call that does not fit waits (its message unread) instead of being refused, and goes on when
        the other holder releases."""
        intake = IntakeBudget(grpc_read_cost(LIMIT))
        h = harness_factory(intake=intake, admission_wait_s=TIMEOUT_S)
        other = intake.reservation()
        assert other.grow(20)
        outcome: list[ExportTraceServiceResponse] = []
        call = threading.Thread(target=lambda: outcome.append(h.export(_request(2, trace=4))))
        call.start()
        call.join(0.5)
        assert (True, 0, 20) == (call.is_alive(), h.stream.qsize(), intake.reserved)  # waiting, nothing read
        other.release()
        call.join(TIMEOUT_S)
        assert 1 == len(outcome)
        assert (1, 0, 0.0) == (h.stream.qsize(), intake.reserved, h.rejected("intake_budget"))

    def test_beyond_max_waiting_refused_at_once(self, harness_factory: Callable[..., Harness]) -> None:
        """With ``max_waiting`` calls waiting, one more is UNAVAILABLE + RetryInfo at once (not after the
        wait, which would outlast the call's deadline), counted ``intake_budget``."""
        intake = IntakeBudget(grpc_read_cost(LIMIT))
        h = harness_factory(intake=intake, admission_wait_s=60.0, max_waiting=0)
        other = intake.reservation()
        assert other.grow(20)
        error = h.export_error(_request().SerializeToString())
        assert grpc.StatusCode.UNAVAILABLE == error.code()
        assert RETRY_INFO_KEY in dict(error.trailing_metadata())
        assert (1.0, 1.0, 20) == (h.rejected("intake_budget"), h.requests(503), intake.reserved)
        other.release()
        h.assert_still_works()

    @pytest.mark.parametrize("limit_mb", [512, 1024])
    def test_small_concurrent_exports_are_not_refused(
        self, harness_factory: Callable[..., Harness], limit_mb: int
    ) -> None:
        """48 concurrent exports of the SDK's 512-span batches, at the default 20 MiB message limit and the
        intake budget of a 512 MiB or the default 1,024 MiB memory limit, are all accepted (they queue
        for the read, they are not refused)."""
        intake = IntakeBudget(intake_budget_bytes(limit_mb * MIB))
        h = harness_factory(intake=intake, max_message_bytes=20 * MIB, max_batches=1000)
        calls = 48
        barrier = threading.Barrier(calls)
        failures: list[BaseException] = []

        def send(trace: int) -> None:
            try:
                with grpc.insecure_channel(h.target) as channel:
                    grpc.channel_ready_future(channel).result(timeout=TIMEOUT_S)
                    barrier.wait()
                    payload = _request(512, trace=trace, padding=200).SerializeToString()
                    channel.unary_unary(EXPORT_METHOD)(payload, timeout=TIMEOUT_S)
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                failures.append(exc)

        threads = [threading.Thread(target=send, args=(i + 1,)) for i in range(calls)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [] == failures
        assert (calls, 0.0, 0) == (h.stream.qsize(), h.rejected("intake_budget"), intake.reserved)


class TestServer:
    async def _bind_twice(self, port: int) -> None:
        metrics = CollectorMetrics(CollectorRegistry())
        stream = InProcessStream(1, 1.0)
        kwargs: dict[str, Any] = {"host": "127.0.0.1", "port": port, "max_message_bytes": LIMIT, "retry_after_s": 1}
        first = await create_grpc_server(stream, metrics, **kwargs)
        await first.start()
        try:
            await create_grpc_server(stream, metrics, **kwargs)
        finally:
            await first.stop(None)

    def test_busy_port_fails(self) -> None:
        """Binding a port already served raises a one-line ListenError, never shares it (no SO_REUSEPORT)."""
        with pytest.raises(ListenError, match=r"cannot listen on 127\.0\.0\.1"):
            asyncio.run(self._bind_twice(_free_port()))

    def test_grpc_series_exists_at_zero(self, h: Harness) -> None:
        """Creating the receiver creates the grpc spans-received series at zero."""
        assert 0.0 == h.sample("vigil_spans_received_total", encoding="grpc")
