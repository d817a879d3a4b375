"""Tests of collector.kafka: record format, byte budget, refusals and delivery failures (fake producer)."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry

from collector.errors import BackpressureError
from collector.kafka import KafkaPublisher, ProducerConfig, record_key
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch
from collector.otlp import decode_protobuf
from tests.support.fixtures import wait_until
from tests.support.kafka import FakeProducer
from tests.support.spans import span


class Harness:
    """A publisher on a fake producer, started and connected."""

    def __init__(self, buffer_bytes: int = 1 << 20, **config: object) -> None:
        self.registry = CollectorRegistry()
        self.metrics = CollectorMetrics(self.registry)
        self.producers: list[FakeProducer] = []
        cfg = ProducerConfig(bootstrap="k1:9092,k2:9092", buffer_bytes=buffer_bytes, **config)  # type: ignore[arg-type]
        self.publisher = KafkaPublisher(
            cfg, retry_after_s=3, metrics=self.metrics, registry=self.registry, producer_factory=self._make
        )

    def _make(self, **options: object) -> FakeProducer:
        producer = FakeProducer(**options)
        self.producers.append(producer)
        return producer

    def connect(self) -> FakeProducer:
        self.publisher.start()
        assert wait_until(self.publisher.ready, timeout_s=5)
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


class TestClientLibrary:
    """kafka-python runs with what the throughput figures assume."""

    def test_c_crc32c_in_use(self) -> None:
        """The C crc32c extension is installed and used (the pure-Python CRC is ~10× slower)."""
        import crc32c
        from kafka.record import util

        assert crc32c.crc32c is util._crc32c
