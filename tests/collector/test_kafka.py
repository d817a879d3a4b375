"""Tests of collector.kafka: record format, byte budget, refusals, delivery failures and the wait for
Kafka's acknowledgement before a request is answered (fake producer)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from collector.errors import BackpressureError
from collector.grpc_receiver import EXPORT_METHOD, RETRY_INFO_KEY, create_grpc_server
from collector.kafka import DEFAULT_ACK_TIMEOUT_S, KafkaPublisher, ProducerConfig, record_key
from collector.limits import LimitedPublisher, MemoryLimiter
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch
from collector.otlp import decode_protobuf, encode_batch
from collector.receiver import create_otlp_app
from collector.spool import Spool
from tests.support.fixtures import wait_until
from tests.support.kafka import FakeProducer
from tests.support.spans import span
from vigil.process import free_port


class Harness:
    """A publisher on a fake producer, started and connected."""

    def __init__(
        self,
        buffer_bytes: int = 1 << 20,
        ack_timeout_s: float = DEFAULT_ACK_TIMEOUT_S,
        spool: Spool | None = None,
        **config: object,
    ) -> None:
        self.registry = CollectorRegistry()
        self.metrics = CollectorMetrics(self.registry)
        self.producers: list[FakeProducer] = []
        cfg = ProducerConfig(bootstrap="k1:9092,k2:9092", buffer_bytes=buffer_bytes, **config)  # type: ignore[arg-type]
        self.publisher = KafkaPublisher(
            cfg,
            retry_after_s=3,
            ack_timeout_s=ack_timeout_s,
            metrics=self.metrics,
            registry=self.registry,
            producer_factory=self._make,
            spool=spool,
        )

    def _make(self, **options: object) -> FakeProducer:
        producer = FakeProducer(**options)
        self.producers.append(producer)
        return producer

    def connect(self) -> FakeProducer:
        self.publisher.start()
        # with a spool the publisher is ready before its producer exists: wait for the producer too
        assert wait_until(lambda: self.publisher.ready() and bool(self.producers), timeout_s=5)
        return self.producers[0]

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


def _batch(n_spans: int = 3) -> TraceBatch:
    first = span()
    spans = (first, *(span(trace_id=first.trace_id, parent_span_id=first.span_id) for _ in range(n_spans - 1)))
    return TraceBatch(first.trace_id, spans)


class TestRecords:
    """Records match the otelcol kafka exporter with partition_traces_by_id: true."""

    def test_key_and_value(self) -> None:
        """One record per trace: key = lowercase hex trace id, value = the trace's ExportTraceServiceRequest."""
        h = Harness()
        producer = h.connect()
        batches = [_batch(3), _batch(2)]
        h.publisher.publish(batches)
        assert [("otlp_spans", b.trace_id.encode()) for b in batches] == [(t, k) for t, k, _, _ in producer.sent]
        for batch, (_, _, value, _) in zip(batches, producer.sent, strict=True):
            request = ExportTraceServiceRequest.FromString(value)
            assert len(batch.spans) == sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            decoded = decode_protobuf(value).batches
            assert [batch.trace_id] == [b.trace_id for b in decoded]

    def test_record_key_lowercases(self) -> None:
        """Upper-case ids become the lowercase key the exporter writes."""
        assert b"abcdef" == record_key("ABCDEF")

    def test_producer_options(self) -> None:
        """acks=all and idempotence by default; compression maps 'none' to None."""
        h = Harness(compression="zstd")
        options = h.connect().options
        assert ("all", True, "zstd") == (options["acks"], options["enable_idempotence"], options["compression_type"])
        assert ["k1:9092", "k2:9092"] == options["bootstrap_servers"]
        assert Harness().connect().options["compression_type"] is None

    def test_missing_codec_refused_at_start(self) -> None:
        """A compression whose library is missing refuses to start, naming the key and the package."""
        import kafka.codec

        from collector.errors import SettingsError
        from collector.kafka import check_compression

        missing = next((c for c in ("snappy", "lz4") if not getattr(kafka.codec, f"has_{c}")()), None)
        if missing is None:
            pytest.skip("!!! snappy and lz4 are both installed: no missing codec to refuse")
        with pytest.raises(SettingsError) as info:
            check_compression(missing)
        assert "VIGIL_KAFKA_COMPRESSION" == info.value.variable
        assert "pip install" in info.value.reason
        check_compression("gzip")

    def test_unknown_compression_refused(self) -> None:
        """A compression outside the known set fails at construction."""
        with pytest.raises(ValueError, match="compression"):
            ProducerConfig(bootstrap="k:1", compression="brotli").producer_options()


class TestBackpressure:
    """Memory is bounded by the byte budget; refusals are counted, never silent."""

    def test_not_connected_refuses(self) -> None:
        """Before the producer bootstrapped, a publish raises BackpressureError and counts the spans."""
        h = Harness()
        with pytest.raises(BackpressureError) as info:
            h.publisher.publish([_batch(4)])
        assert 3 == info.value.retry_after
        assert 4 == h.value("vigil_refused_total", stage="kafka", reason="unavailable")
        assert not h.publisher.ready()

    def test_budget_full_refuses_all_or_nothing(self) -> None:
        """Unacknowledged bytes over the budget: the whole publish is refused; acks free the budget."""
        h = Harness(buffer_bytes=65536)
        producer = h.connect()
        big = [_batch(1500)]
        h.publisher.publish(big)
        assert 0 < h.publisher.pending_bytes
        with pytest.raises(BackpressureError):
            h.publisher.publish([_batch(2), *big])
        assert 1 == len(producer.sent)
        assert 1502 == h.value("vigil_refused_total", stage="kafka", reason="full")
        producer.sent[0][3].succeed()
        assert 0 == h.publisher.pending_bytes
        assert 1 == h.value("vigil_kafka_records_sent_total")
        h.publisher.publish(big)
        assert 2 == len(producer.sent)

    def test_check_room(self) -> None:
        """The early check refuses when not connected or when the hinted size would overflow the budget."""
        h = Harness(buffer_bytes=1 << 20)
        with pytest.raises(BackpressureError):
            h.publisher.check_room(0)
        producer = h.connect()
        h.publisher.check_room(10**9)  # an empty buffer takes anything (as publish does)
        h.publisher.publish([_batch(1500)])
        room = (1 << 20) - h.publisher.pending_bytes
        h.publisher.check_room(room)
        with pytest.raises(BackpressureError):
            h.publisher.check_room(room + 1)
        assert 0 == h.value("vigil_refused_total", stage="kafka", reason="full")  # spans unknown: not counted
        producer.sent[0][3].succeed()
        h.publisher.check_room(10**9)

    def test_delivery_failure_counted_and_frees_budget(self) -> None:
        """A record failing after the producer's retries is counted in both failure metrics."""
        h = Harness()
        producer = h.connect()
        h.publisher.publish([_batch(5)])
        producer.sent[0][3].fail(TimeoutError("delivery timeout"))
        assert 1 == h.value("vigil_kafka_delivery_failures_total")
        assert 5 == h.value("vigil_dropped_total", stage="kafka", reason="delivery_failed")
        assert 0 == h.publisher.pending_bytes

    def test_send_error_asks_for_retry(self) -> None:
        """An error from send() becomes BackpressureError and gives the budget back."""
        h = Harness()
        producer = h.connect()
        producer.fail_sends = RuntimeError("metadata timeout")
        with pytest.raises(BackpressureError):
            h.publisher.publish([_batch(2)])
        assert 0 == h.publisher.pending_bytes

    def test_shutdown_flushes_and_closes(self) -> None:
        """shutdown acknowledges what is pending, closes the producer and refuses afterwards."""
        h = Harness()
        producer = h.connect()
        h.publisher.publish([_batch(2)])
        assert h.publisher.shutdown(1.0)
        assert producer.closed
        with pytest.raises(BackpressureError):
            h.publisher.publish([_batch(2)])


def _body(batches: list[TraceBatch]) -> bytes:
    """One OTLP protobuf request holding ``batches`` (one trace each)."""
    request = ExportTraceServiceRequest()
    for batch in batches:
        request.MergeFromString(encode_batch(batch))
    return bytes(request.SerializeToString())


class TestAcknowledged:
    """publish_body, awaited by the receivers, returns only once Kafka acknowledged every record."""

    def test_returns_after_the_last_acknowledgement(self) -> None:
        """The wait ends when the last of the request's records is acknowledged, not before."""
        h = Harness()
        producer = h.connect()
        batches = [_batch(2), _batch(3)]

        async def scenario() -> list[bool]:
            task = asyncio.create_task(h.publisher.publish_body(batches, b"", "protobuf"))
            seen = []
            await asyncio.sleep(0.01)
            seen.append(task.done())
            producer.sent[0][3].succeed()
            await asyncio.sleep(0.01)
            seen.append(task.done())
            producer.sent[1][3].succeed()
            await asyncio.wait_for(task, 5)
            seen.append(task.done())
            return seen

        assert [False, False, True] == asyncio.run(scenario())
        assert 2 == h.value("vigil_kafka_records_sent_total")
        assert 0 == h.publisher.pending_bytes

    def test_ack_timeout_answers_503_and_counts(self) -> None:
        """No acknowledgement within the timeout: the OTLP/HTTP request gets 503 + Retry-After, the spans
        are counted as refused (the sender retries), not as dropped; a late ack frees the budget."""
        h = Harness(ack_timeout_s=0.05)
        producer = h.connect()
        limited = LimitedPublisher(h.publisher, MemoryLimiter(0), 3, h.metrics)  # as vigil collector wires it
        app = create_otlp_app(limited, h.metrics, max_body_bytes=1 << 20, retry_after_s=1)
        batches = [_batch(4), _batch(2)]
        with TestClient(app) as client:
            response = client.post(
                "/v1/traces", content=_body(batches), headers={"Content-Type": "application/x-protobuf"}
            )
        assert 503 == response.status_code
        assert "3" == response.headers["Retry-After"]
        assert 2 == len(producer.sent)
        assert 6 == h.value("vigil_refused_total", stage="kafka", reason="ack_timeout")
        assert 1 == h.value("vigil_otlp_requests_total", encoding="protobuf", code="503")
        assert 0 == h.value("vigil_otlp_requests_total", encoding="protobuf", code="200")
        assert 0 == h.value("vigil_spans_received_total", encoding="protobuf")
        for *_, future in producer.sent:
            future.succeed()  # arrives after the answer: the retry duplicates spans, merged on span id
        assert 0 == h.publisher.pending_bytes
        assert 0 == h.value("vigil_dropped_total", stage="kafka", reason="delivery_failed")

    def test_grpc_ack_timeout_is_unavailable_and_counted(self) -> None:
        """The same over OTLP/gRPC: UNAVAILABLE with a RetryInfo trailer, spans counted as refused."""
        h = Harness(ack_timeout_s=0.05)
        h.connect()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        port = free_port()

        async def start() -> grpc.aio.Server:
            server = await create_grpc_server(
                h.publisher, h.metrics, host="127.0.0.1", port=port, max_message_bytes=1 << 20, retry_after_s=1
            )
            await server.start()
            return server

        server = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(EXPORT_METHOD)(_body([_batch(5)]), timeout=10)
            assert grpc.StatusCode.UNAVAILABLE == info.value.code()
            trailers = dict(info.value.trailing_metadata() or ())
            assert RETRY_INFO_KEY in trailers
            assert 5 == h.value("vigil_refused_total", stage="kafka", reason="ack_timeout")
            assert 1 == h.value("vigil_otlp_requests_total", encoding="grpc", code="503")
        finally:
            asyncio.run_coroutine_threadsafe(server.stop(None), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()

    def test_acknowledged_request_answers_200(self) -> None:
        """The same wiring answers 200 once the producer acknowledges (here: at once)."""
        h = Harness(ack_timeout_s=5)
        producer = h.connect()
        producer.ack_on_send = True
        app = create_otlp_app(h.publisher, h.metrics, max_body_bytes=1 << 20, retry_after_s=1)
        with TestClient(app) as client:
            response = client.post(
                "/v1/traces", content=_body([_batch(3)]), headers={"Content-Type": "application/x-protobuf"}
            )
        assert 200 == response.status_code
        assert 3 == h.value("vigil_spans_received_total", encoding="protobuf")
        assert 0 == h.value("vigil_refused_total", stage="kafka", reason="ack_timeout")

    def test_failed_record_refuses_the_request(self) -> None:
        """A record that fails while its request waits: 503 at once, counted as refused, never as dropped."""
        h = Harness()
        producer = h.connect()

        async def scenario() -> BackpressureError:
            task = asyncio.create_task(h.publisher.publish_body([_batch(2), _batch(5)], b"", "protobuf"))
            await asyncio.sleep(0.01)
            producer.sent[0][3].succeed()
            producer.sent[1][3].fail(TimeoutError("delivery timeout"))
            with pytest.raises(BackpressureError) as info:
                await asyncio.wait_for(task, 5)
            return info.value

        error = asyncio.run(scenario())
        assert 3 == error.retry_after
        assert 7 == h.value("vigil_refused_total", stage="kafka", reason="delivery_failed")
        assert 0 == h.value("vigil_dropped_total", stage="kafka", reason="delivery_failed")
        assert 1 == h.value("vigil_kafka_delivery_failures_total")
        assert 0 == h.publisher.pending_bytes

    def test_memory_limit_refuses_before_producing(self) -> None:
        """LimitedPublisher checks the memory ceiling before the records reach the producer."""
        h = Harness()
        producer = h.connect()
        limited = LimitedPublisher(h.publisher, MemoryLimiter(1, read_rss=lambda: 2), 3, h.metrics)
        with pytest.raises(BackpressureError):
            asyncio.run(limited.publish_body([_batch(2)], b"", "protobuf"))
        assert [] == producer.sent
        assert 2 == h.value("vigil_refused_total", stage="receiver", reason="memory_limit")


def _wait(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class TestSpool:
    """With a spool, requests Kafka does not take are spooled (200), then drained to Kafka in order."""

    def test_spooled_while_kafka_does_not_answer_then_drained_in_order(self, tmp_path: Path) -> None:
        """No acknowledgement in time: the body is spooled and the request succeeds; later requests go to
        the spool too; once Kafka answers, the drain produces them in order and requests go direct again."""
        spool = Spool(tmp_path / "spool", fsync="batch")
        h = Harness(ack_timeout_s=0.05, spool=spool)
        producer = h.connect()
        first, second = [_batch(3), _batch(2)], [_batch(4)]
        asyncio.run(h.publisher.publish_body(first, _body(first), "protobuf"))  # times out: spooled, no error
        assert 1 == spool.unacked
        assert 1 == h.value("vigil_kafka_spooling")
        assert 0 == h.value("vigil_refused_total", stage="kafka", reason="ack_timeout")  # answered 200, not refused
        direct = len(producer.sent)
        asyncio.run(h.publisher.publish_body(second, _body(second), "protobuf"))  # spooling: to the spool
        assert 2 == spool.unacked
        producer.ack_on_send = True  # Kafka answers again
        _wait(lambda: spool.unacked == 0, "the drain")
        drained = [key for _, key, _, _ in producer.sent[direct:]]  # drain rounds, retried until acknowledged
        assert [record_key(b.trace_id) for b in first + second] == list(dict.fromkeys(drained))  # in order
        _wait(lambda: h.value("vigil_kafka_spooling") == 0, "spooling off")
        assert 2 == h.value("vigil_kafka_spool_drained_total")
        third = [_batch(1)]
        asyncio.run(h.publisher.publish_body(third, _body(third), "protobuf"))
        assert record_key(third[0].trace_id) == producer.sent[-1][1]
        assert 0 == spool.unacked
        assert h.publisher.shutdown(1.0)

    def test_full_spool_refuses_and_counts(self, tmp_path: Path) -> None:
        """Past the spool's byte budget the request is refused (503) and its spans counted."""
        spool = Spool(tmp_path / "spool", max_bytes=64)
        h = Harness(spool=spool)  # never connected: every request goes to the spool
        h.publisher.start()
        batches = [_batch(3)]
        asyncio.run(h.publisher.publish_body(batches, _body(batches), "protobuf"))  # an empty spool takes anything
        with pytest.raises(BackpressureError):
            asyncio.run(h.publisher.publish_body(batches, _body(batches), "protobuf"))
        assert 3 == h.value("vigil_refused_total", stage="spool", reason="full")
        assert h.publisher.ready()  # a spool takes requests while Kafka is unreachable
        h.publisher.shutdown(1.0)

    def test_restart_drains_what_the_last_process_spooled(self, tmp_path: Path) -> None:
        """Bodies left in the spool by a previous process are produced once Kafka is reachable."""
        directory = tmp_path / "spool"
        left = [_batch(2), _batch(5)]
        old = Spool(directory)
        old.open()
        _, future = old.append(_body(left), "protobuf")
        assert future is not None
        future.result(5)
        old.close()
        spool = Spool(directory)
        h = Harness(spool=spool)
        producer = h.connect()
        producer.ack_on_send = True
        _wait(lambda: spool.unacked == 0, "the drain of the old spool")
        assert [record_key(b.trace_id) for b in left] == [key for _, key, _, _ in producer.sent]
        assert h.publisher.shutdown(1.0)
        assert [] == spool.segment_paths()


class TestClientLibrary:
    """kafka-python runs with what the throughput figures assume."""

    def test_c_crc32c_in_use(self) -> None:
        """The C crc32c extension is installed and used (the pure-Python CRC is ~10× slower)."""
        import crc32c
        from kafka.record import util

        assert crc32c.crc32c is util._crc32c
