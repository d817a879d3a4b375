"""Tests for collector.limits: the memory ceiling in front of the publishers."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from collector.errors import BackpressureError
from collector.limits import (
    INTAKE_COST_FACTOR,
    INTAKE_SHARE,
    IntakeBudget,
    LimitedPublisher,
    MemoryLimiter,
    intake_budget_bytes,
    intake_cost,
    rss_bytes,
)
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch
from collector.receiver import create_otlp_app
from collector.stream import InProcessStream
from tests.support.spans import span


class Memory:
    """An injected RSS reading and clock."""

    def __init__(self) -> None:
        self.rss = 100
        self.now = 0.0
        self.reads = 0

    def read(self) -> int:
        self.reads += 1
        return self.rss


def test_rss_is_read_on_linux() -> None:
    """The real reading is a plausible resident size for a Python process."""
    assert 10 * 1024 * 1024 < rss_bytes() < 64 * 1024**3


def test_limiter_caches_reading_for_the_interval() -> None:
    """Readings are re-taken only after the interval; a zero limit never refuses."""
    m = Memory()
    limiter = MemoryLimiter(150, read_rss=m.read, check_interval_s=1.0, clock=lambda: m.now)
    assert not limiter.over()
    m.rss = 200
    assert not limiter.over()  # still the cached reading
    m.now = 1.0
    assert limiter.over()
    assert 2 == m.reads
    assert not MemoryLimiter(0, read_rss=m.read).over()


def _batch() -> TraceBatch:
    s = span()
    return TraceBatch(s.trace_id, (s, span(trace_id=s.trace_id)), 0)


class Limited:
    """A LimitedPublisher over an in-process stream, with a 150-byte ceiling on a settable RSS."""

    def __init__(self, capacity: int = 10, retry_after_s: int = 7) -> None:
        self.memory = Memory()
        self.registry = CollectorRegistry()
        self.metrics = CollectorMetrics(self.registry)
        self.stream = InProcessStream(capacity, 1.0, self.metrics)
        limiter = MemoryLimiter(150, read_rss=self.memory.read, check_interval_s=0)
        self.publisher = LimitedPublisher(self.stream, limiter, retry_after_s, self.metrics)


def test_limited_publisher_refuses_and_counts() -> None:
    """Over the ceiling nothing reaches the stream, the spans are counted, and Retry-After is set."""
    limited = Limited()
    m, registry, stream, publisher = limited.memory, limited.registry, limited.stream, limited.publisher
    publisher.publish([_batch()])
    m.rss = 151
    with pytest.raises(BackpressureError, match="memory limit of 150 bytes") as info:
        publisher.publish([_batch()])
    assert 7 == info.value.retry_after
    assert 1 == stream.qsize()
    assert 2.0 == registry.get_sample_value("vigil_refused_total", {"stage": "receiver", "reason": "memory_limit"})
    assert publisher.ready()


def test_limited_publisher_check_room() -> None:
    """The early check refuses over the memory ceiling and when the inner stream is full."""
    limited = Limited(capacity=1)
    m, publisher = limited.memory, limited.publisher
    publisher.check_room(0)
    m.rss = 151
    with pytest.raises(BackpressureError, match="memory limit"):
        publisher.check_room(0)
    m.rss = 100
    publisher.publish([_batch()])
    with pytest.raises(BackpressureError):
        publisher.check_room(0)


def test_receiver_answers_503_while_over_and_recovers() -> None:
    """Through the OTLP/HTTP receiver: 503 + Retry-After with the reason, then 200 once memory is back."""
    limited = Limited(retry_after_s=4)
    m, stream = limited.memory, limited.stream
    client = TestClient(create_otlp_app(limited.publisher, limited.metrics, max_body_bytes=1 << 20, retry_after_s=2))
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="x")
    headers = {"Content-Type": "application/x-protobuf"}
    m.rss = 1000
    refused = client.post("/v1/traces", content=request.SerializeToString(), headers=headers)
    assert (503, "4") == (refused.status_code, refused.headers["Retry-After"])
    assert "memory limit" in refused.text
    m.rss = 100
    assert 200 == client.post("/v1/traces", content=request.SerializeToString(), headers=headers).status_code
    assert 1 == stream.qsize()


class TestIntakeBudget:
    def test_budget_is_the_documented_share_of_the_limit(self) -> None:
        """A quarter of the memory limit; no limit means no budget (0: unlimited)."""
        assert 0.25 == INTAKE_SHARE
        assert (128 * 2**20, 0) == (intake_budget_bytes(512 * 2**20), intake_budget_bytes(0))
        assert (0, 4, 35) == (intake_cost(0), intake_cost(1), intake_cost(10))
        assert INTAKE_COST_FACTOR > 2.4  # the measured size of decoded spans per protobuf body byte

    def test_reservations_share_the_budget_and_refuse_when_spent(self) -> None:
        """Grows are granted while the total fits; one that does not is refused whole (nothing
        taken); shrinking and releasing give bytes back, release twice is harmless."""
        budget = IntakeBudget(100)
        a, b = budget.reservation(), budget.reservation()
        assert a.grow(60)
        assert b.grow(40)
        assert not b.grow(1)
        assert (100, 60, 40) == (budget.reserved, a.held, b.held)
        a.shrink(10)
        assert b.grow(10)
        a.release()
        a.release()
        b.shrink(1000)  # never more than held
        assert (0, 0, 0) == (budget.reserved, a.held, b.held)

    def test_an_oversized_reservation_is_granted_only_alone(self) -> None:
        """A body larger than the whole budget passes when nothing else is reserved (else a small
        budget would refuse it for ever), and keeps growing while alone; others are then refused."""
        budget = IntakeBudget(100)
        big, other = budget.reservation(), budget.reservation()
        assert big.grow(150)
        assert big.grow(50)
        assert not other.grow(1)
        big.release()
        assert other.grow(1)
        assert not big.grow(150)  # no longer alone
        assert 1 == budget.reserved

    def test_zero_budget_never_refuses(self) -> None:
        """No memory limit: reservations always pass (and are still counted)."""
        budget = IntakeBudget(0)
        r = budget.reservation()
        assert r.grow(10**12)
        assert budget.reservation().grow(10**12)
        assert 2 * 10**12 == budget.reserved

    def test_concurrent_grows_never_exceed_the_budget(self) -> None:
        """8 threads growing and releasing at once never hold more than the budget together."""
        budget = IntakeBudget(1000)
        peak: list[int] = []
        start = threading.Barrier(8)

        def work() -> None:
            r = budget.reservation()
            start.wait()
            for _ in range(2000):
                if r.grow(300):
                    peak.append(budget.reserved)
                r.release()

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert 0 == budget.reserved
        assert peak
        assert max(peak) <= 1000
