"""Tests for collector.owed: the ledger of spans refused after decoding, and the publisher that keeps it."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from collector.errors import BackpressureError, StreamFullError
from collector.limits import LimitedPublisher, MemoryLimiter
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch
from collector.owed import OwedMetrics, OwedPublisher, OwedSpans
from collector.receiver import create_otlp_app
from collector.stream import InProcessStream
from tests.support.fixtures import Clock
from tests.support.spans import span


def traced(trace_id: str, *span_ids: str) -> TraceBatch:
    return TraceBatch(trace_id, tuple(span(trace_id=trace_id, span_id=sid) for sid in span_ids), 0)


A, B = "a" * 32, "b" * 32


class TestLedger:
    def test_spans_are_struck_off_as_they_arrive(self) -> None:
        owed = OwedSpans(clock=Clock())
        owed.record([traced(A, "1" * 16, "2" * 16), traced(B, "3" * 16)])
        assert (A in owed, B in owed, 3) == (True, True, owed.spans)
        owed.arrived(A, [span(trace_id=A, span_id="1" * 16), span(trace_id=A, span_id="9" * 16)])
        assert (A in owed, 2) == (True, owed.spans)
        owed.arrived(A, traced(A, "2" * 16).spans)
        assert (A in owed, 1) == (False, owed.spans)

    def test_a_refused_retry_is_recorded_once(self) -> None:
        owed = OwedSpans(clock=Clock())
        owed.record([traced(A, "1" * 16)])
        owed.record([traced(A, "1" * 16)])
        assert 1 == owed.spans

    def test_full_ledger_forgets_the_oldest_trace_and_counts(self) -> None:
        registry = CollectorRegistry()
        owed = OwedSpans(max_spans=3, clock=Clock(), metrics=OwedMetrics(registry))
        owed.record([traced(A, "1" * 16, "2" * 16)])
        assert not owed.full()
        owed.record([traced(B, "3" * 16, "4" * 16)])
        assert (A in owed, B in owed, owed.spans) == (False, True, 2)
        assert 2.0 == registry.get_sample_value("vigil_owed_spans_forgotten_total", {"reason": "full"})
        assert 2.0 == registry.get_sample_value("vigil_owed_spans")

    def test_traces_not_retried_within_the_horizon_expire(self) -> None:
        clock, registry = Clock(100.0), CollectorRegistry()
        owed = OwedSpans(horizon_s=60, clock=clock, metrics=OwedMetrics(registry))
        owed.record([traced(A, "1" * 16), traced(B, "2" * 16)])
        clock.now += 30
        owed.record([traced(A, "1" * 16)])  # refused again: waited for from now
        clock.now += 45
        owed.expire()
        assert (A in owed, B in owed) == (True, False)
        assert 1.0 == registry.get_sample_value("vigil_owed_spans_forgotten_total", {"reason": "expired"})

    def test_max_spans_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="max_spans"):
            OwedSpans(max_spans=0)


class Stack:
    """OwedPublisher → LimitedPublisher (a settable RSS, 150-byte ceiling) → InProcessStream."""

    def __init__(self, capacity: int = 1, max_spans: int = 100, max_decode_bytes: int = 1 << 20) -> None:
        self.rss = 0
        self.metrics = CollectorMetrics(CollectorRegistry())
        self.stream = InProcessStream(capacity, 1.0, self.metrics)
        limiter = MemoryLimiter(150, read_rss=lambda: self.rss, check_interval_s=0)
        self.owed = OwedSpans(max_spans=max_spans, clock=Clock())
        self.publisher = OwedPublisher(
            LimitedPublisher(self.stream, limiter, 3, self.metrics), self.owed, max_decode_bytes=max_decode_bytes
        )


class TestPublisher:
    def test_a_refused_publish_is_recorded(self) -> None:
        stack = Stack()
        stack.publisher.publish([traced(A, "1" * 16)])
        with pytest.raises(StreamFullError):
            stack.publisher.publish([traced(B, "2" * 16)])
        assert (A in stack.owed, B in stack.owed) == (False, True)

    def test_a_refused_body_is_recorded(self) -> None:
        stack = Stack()
        stack.publisher.publish([traced(A, "1" * 16)])
        with pytest.raises(StreamFullError):
            asyncio.run(stack.publisher.publish_body([traced(B, "2" * 16)], b"body", "protobuf"))
        assert B in stack.owed

    def test_a_full_stream_is_not_refused_before_reading_while_the_ledger_has_room(self) -> None:
        stack = Stack()
        stack.publisher.publish([traced(A, "1" * 16)])
        stack.publisher.check_room(0)  # read and decode it: its refusal will be recorded

    def test_a_body_too_large_to_decode_for_the_ledger_is_refused_undecoded(self) -> None:
        """Only bodies up to max_decode_bytes are decoded to record their refusal; a larger one (its size
        known once read) is refused before decoding, as without the ledger."""
        stack = Stack(max_decode_bytes=1000)
        stack.publisher.publish([traced(A, "1" * 16)])
        stack.publisher.check_room(0)  # size not known yet: read it
        stack.publisher.check_room(1000)
        with pytest.raises(StreamFullError):
            stack.publisher.check_room(1001)

    def test_a_full_ledger_refuses_before_reading_again(self) -> None:
        stack = Stack(max_spans=1)
        stack.publisher.publish([traced(A, "1" * 16)])
        with pytest.raises(StreamFullError):
            stack.publisher.publish([traced(B, "2" * 16)])
        with pytest.raises(StreamFullError):
            stack.publisher.check_room(0)

    def test_memory_and_a_closed_stream_still_refuse_before_reading(self) -> None:
        stack = Stack()
        stack.rss = 151
        with pytest.raises(BackpressureError, match="memory limit"):
            stack.publisher.check_room(0)
        stack.rss = 0
        stack.stream.close()
        with pytest.raises(StreamFullError):
            stack.publisher.check_room(0)
        assert not stack.publisher.ready()

    def test_through_the_receiver_the_refused_spans_are_known(self) -> None:
        """A full stream: the body is read, decoded and answered 503; its trace is owed, then the
        retry (200, once there is room) strikes nothing off here: the assembler does that."""
        stack = Stack()
        stack.publisher.publish([traced(A, "1" * 16)])
        app = create_otlp_app(stack.publisher, stack.metrics, max_body_bytes=1 << 20, retry_after_s=2)
        request = ExportTraceServiceRequest()
        request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\xbb" * 16, span_id=b"\x02" * 8, name="x")
        with TestClient(app) as client:
            refused = client.post(
                "/v1/traces", content=request.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
            )
        assert (503, "2") == (refused.status_code, refused.headers["Retry-After"])
        assert (B in stack.owed, 1) == (True, stack.owed.spans)
