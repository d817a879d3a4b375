"""Tests for collector.stream: bounded, all-or-nothing, blocking reads, thread safety, metrics."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from collector.budget import SPAN_OVERHEAD_BYTES, Pressure
from collector.errors import BackpressureError
from collector.metrics import CollectorMetrics
from collector.model import Span, TraceBatch
from collector.stream import BodyPublisher, InProcessStream, Publisher, check_room, keeps_bodies


def _batch(i: int, spans: int = 1) -> TraceBatch:
    trace_id = f"{i + 1:032x}"
    return TraceBatch(trace_id, tuple(Span(trace_id, f"{j + 1:016x}", None, "op") for j in range(spans)))


class TestInProcessStream:
    def test_is_a_publisher(self) -> None:
        """The stream satisfies the Publisher protocol."""
        stream: Publisher = InProcessStream(1, 1.0)
        stream.publish([])

    def test_fifo(self) -> None:
        """Records come out in the order they went in."""
        stream = InProcessStream(10, 1.0)
        stream.publish([_batch(0), _batch(1)])
        stream.publish([_batch(2)])
        assert [_batch(0), _batch(1), _batch(2)] == stream.get_many(10, 0)

    def test_all_or_nothing(self) -> None:
        """A publish that does not fit entirely takes nothing and raises BackpressureError."""
        stream = InProcessStream(3, 2.5)
        stream.publish([_batch(0), _batch(1)])
        with pytest.raises(BackpressureError) as info:
            stream.publish([_batch(2), _batch(3)])
        assert (2.5, 2) == (info.value.retry_after, stream.qsize())
        stream.publish([_batch(2)])
        assert 3 == stream.qsize()

    def test_oversized_publish_only_into_empty_stream(self) -> None:
        """A publish larger than the capacity is accepted into an empty stream rather than refused forever."""
        stream = InProcessStream(2, 1.0)
        stream.publish([_batch(i) for i in range(3)])
        assert 3 == stream.qsize()
        with pytest.raises(BackpressureError):
            stream.publish([_batch(9)])

    def test_get_many_caps_and_times_out(self) -> None:
        """get_many returns at most max_items, and an empty list after the timeout."""
        stream = InProcessStream(10, 1.0)
        stream.publish([_batch(i) for i in range(5)])
        assert 3 == len(stream.get_many(3, 0))
        assert 2 == len(stream.get_many(3, 0))
        started = time.monotonic()
        assert [] == stream.get_many(3, 0.05)
        assert time.monotonic() - started >= 0.04

    def test_get_many_wakes_on_publish(self) -> None:
        """A waiting consumer is woken by a publish from another thread."""
        stream = InProcessStream(10, 1.0)
        timer = threading.Timer(0.05, stream.publish, [[_batch(0)]])
        timer.start()
        started = time.monotonic()
        assert [_batch(0)] == stream.get_many(10, 5.0)
        assert time.monotonic() - started < 2.0
        timer.join()

    def test_close_drains_then_stops(self) -> None:
        """After close, remaining records are still handed out, publishes are refused and reads return at once."""
        stream = InProcessStream(10, 1.0)
        stream.publish([_batch(0)])
        stream.close()
        assert (False, True) == (stream.ready(), stream.closed)
        with pytest.raises(BackpressureError):
            stream.publish([_batch(1)])
        assert [_batch(0)] == stream.get_many(10, 5.0)
        started = time.monotonic()
        assert [] == stream.get_many(10, 5.0)
        assert time.monotonic() - started < 1.0

    def test_close_wakes_waiting_consumer(self) -> None:
        """close() wakes a consumer blocked in get_many."""
        stream = InProcessStream(10, 1.0)
        timer = threading.Timer(0.05, stream.close)
        timer.start()
        assert [] == stream.get_many(10, 5.0)
        timer.join()

    def test_rejects_bad_capacity(self) -> None:
        """A non-positive capacity is a ValueError."""
        with pytest.raises(ValueError, match="max_batches"):
            InProcessStream(0, 1.0)

    def test_metrics(self) -> None:
        """Refused spans are counted as dropped and the depth is read at scrape time."""
        registry = CollectorRegistry()
        stream = InProcessStream(1, 1.0, CollectorMetrics(registry))
        stream.publish([_batch(0)])
        with pytest.raises(BackpressureError):
            stream.publish([_batch(1, spans=3), _batch(2, spans=2)])
        assert 5.0 == registry.get_sample_value("vigil_refused_total", {"stage": "stream", "reason": "full"})
        assert 1.0 == registry.get_sample_value("vigil_stream_depth_batches")
        assert 1.0 == registry.get_sample_value("vigil_stream_capacity_batches")
        stream.get_many(1, 0)
        assert 0.0 == registry.get_sample_value("vigil_stream_depth_batches")

    def test_thread_safety(self) -> None:
        """Concurrent producers and consumers neither lose nor duplicate records."""
        stream = InProcessStream(50, 0.0)
        producers, per_producer = 4, 500
        received: list[TraceBatch] = []
        done = threading.Event()

        def produce(base: int) -> None:
            for i in range(per_producer):
                while True:
                    try:
                        stream.publish([_batch(base + i)])
                        break
                    except BackpressureError:
                        time.sleep(0.0005)

        def consume() -> None:
            while not (done.is_set() and stream.qsize() == 0):
                received.extend(stream.get_many(7, 0.01))

        consumers = [threading.Thread(target=consume) for _ in range(2)]
        threads = [threading.Thread(target=produce, args=(p * per_producer,)) for p in range(producers)]
        for t in consumers + threads:
            t.start()
        for t in threads:
            t.join(30)
        done.set()
        for t in consumers:
            t.join(30)
        assert [f"{i + 1:032x}" for i in range(producers * per_producer)] == sorted(b.trace_id for b in received)


class TestByteBudget:
    """The stream is bounded in bytes as well as records (issue 15)."""

    def _sized(self, i: int, size: int) -> TraceBatch:
        b = _batch(i)
        return TraceBatch(b.trace_id, b.spans, 0, size)

    def test_refuses_past_its_byte_budget_and_counts_it(self) -> None:
        """Records fit by count but not by bytes: refused (nothing taken), counted as stream/bytes."""
        registry = CollectorRegistry()
        metrics = CollectorMetrics(registry)
        stream = InProcessStream(100, 1.5, metrics, max_bytes=1000)
        stream.publish([self._sized(0, 600)])
        with pytest.raises(BackpressureError) as info:
            stream.publish([self._sized(1, 300), self._sized(2, 200)])
        assert (1.5, 1, 600) == (info.value.retry_after, stream.qsize(), stream.account.held)
        assert 2 == registry.get_sample_value("vigil_refused_total", {"stage": "stream", "reason": "bytes"})
        assert 0 == registry.get_sample_value("vigil_refused_total", {"stage": "stream", "reason": "full"})
        with pytest.raises(BackpressureError):
            stream.check_room(500)
        stream.check_room(400)

    def test_taking_records_frees_their_bytes(self) -> None:
        stream = InProcessStream(100, 1.0, max_bytes=1000)
        stream.publish([self._sized(0, 600), self._sized(1, 400)])
        assert 1000 == stream.account.held
        stream.get_many(1, 0)
        assert 400 == stream.account.held
        stream.publish([self._sized(2, 600)])
        stream.get_many(10, 0)
        assert 0 == stream.account.held

    def test_oversized_record_only_into_an_empty_stream(self) -> None:
        """A body larger than the byte budget is taken by an empty stream, so it is not refused forever."""
        stream = InProcessStream(100, 1.0, max_bytes=1000)
        stream.publish([self._sized(0, 5000)])
        with pytest.raises(BackpressureError):
            stream.publish([self._sized(1, 1)])

    def test_unsized_records_are_estimated(self) -> None:
        """A record built without a size (not from a decoder) still counts, per span."""
        stream = InProcessStream(100, 1.0, max_bytes=10_000)
        stream.publish([_batch(0, spans=3)])
        assert 3 * SPAN_OVERHEAD_BYTES == stream.account.held


class TestPressure:
    """The stream refuses while the assembler's runs in flight are over their caps (issue 25, item 3)."""

    def test_refuses_even_when_empty_while_the_pressure_is_raised_and_counts_it(self) -> None:
        registry = CollectorRegistry()
        pressure = Pressure()
        stream = InProcessStream(100, 2.0, CollectorMetrics(registry), pressure=pressure)
        pressure.raised = True
        with pytest.raises(BackpressureError) as info:
            stream.publish([_batch(0, spans=3)])
        assert (2.0, 0) == (info.value.retry_after, stream.qsize())
        assert 3 == registry.get_sample_value("vigil_refused_total", {"stage": "stream", "reason": "inflight"})
        with pytest.raises(BackpressureError):
            stream.check_room(0)

    def test_accepts_again_once_the_pressure_is_lowered(self) -> None:
        pressure = Pressure()
        stream = InProcessStream(100, 1.0, pressure=pressure)
        pressure.raised = True
        with pytest.raises(BackpressureError):
            stream.publish([_batch(0)])
        pressure.raised = False
        stream.check_room(0)
        stream.publish([_batch(0)])
        assert 1 == stream.qsize()

    def test_a_stream_without_a_downstream_has_its_own_pressure_never_raised(self) -> None:
        stream = InProcessStream(100, 1.0)
        assert stream.pressure.raised is False
        stream.publish([_batch(0)])


class TestProtocolChecks:
    """``check_room`` / ``keeps_bodies`` answer by the publisher's class, as ``isinstance`` would."""

    class _Plain:
        def publish(self, batches: object) -> None: ...

    class _Refusing(_Plain):
        def check_room(self, size_hint: int = 0) -> None:
            raise BackpressureError(1.0, f"full ({size_hint})")

    class _Bodies(_Plain):
        async def publish_body(self, batches: object, body: bytes, encoding: str) -> None: ...

    def test_check_room_asks_a_publisher_that_can_refuse(self) -> None:
        with pytest.raises(BackpressureError, match=r"full \(7\)"):
            check_room(self._Refusing(), 7)
        check_room(self._Plain(), 7)  # no check_room: never refuses

    def test_keeps_bodies_matches_isinstance(self) -> None:
        for publisher in (self._Plain(), self._Refusing(), self._Bodies()):
            assert keeps_bodies(publisher) is isinstance(publisher, BodyPublisher)
        assert keeps_bodies(self._Bodies())
        assert not keeps_bodies(self._Plain())
