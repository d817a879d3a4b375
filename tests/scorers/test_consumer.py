"""Tests of scorers.consumer.KafkaScorer on a fake consumer: commit protocol, pause on store outage, idempotency."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence

from prometheus_client import CollectorRegistry

from collector.kafka import record_key
from collector.model import TraceBatch
from collector.otlp import encode_batch
from scorers.assemble import Assembler
from scorers.consumer import ConsumerConfig, ConsumerMetrics, KafkaScorer
from scorers.metrics import RunMetrics
from scorers.pipeline import Pipeline
from scorers.registry import build_chain
from scorers.rules import compile_rules
from tests.support.fixtures import Clock
from tests.support.kafka import FakeConsumer
from tests.support.review_queue import InMemoryRunSink
from vigil.bench.synth import SynthRun, body, make_run


class Harness:
    """A KafkaScorer over a FakeConsumer and an in-memory sink."""

    def __init__(
        self,
        consumer: FakeConsumer,
        sink: InMemoryRunSink | None = None,
        rekey: Callable[[Sequence[TraceBatch]], None] | None = None,
        feedback: Callable[[Sequence[str]], Mapping[str, Mapping[str, object]]] | None = None,
    ) -> None:
        self.consumer = consumer
        self.sink = sink or InMemoryRunSink()
        self.clock = Clock(0.0)
        self.registry = CollectorRegistry()
        chain = build_chain(("tool_error_rate", "latency"))
        pipeline = Pipeline(chain, compile_rules(None, [n for n, _ in chain]), sample_rate=0.5)
        self.scorer = KafkaScorer(
            ConsumerConfig(bootstrap="fake:9092", commit_interval_s=1e-9),
            lambda: Assembler(quiet_period_s=1.0, clock=self.clock),
            pipeline,
            self.sink,
            metrics=RunMetrics(self.registry),
            consumer_metrics=ConsumerMetrics(self.registry),
            consumer_factory=lambda **_: consumer,
            rekey=rekey,
            feedback=feedback,
        )
        self.scorer._consumer = consumer
        consumer.subscribe([consumer.topic], listener=_listener(self.scorer))

    def tick(self, advance: float = 0.0) -> int:
        self.clock.now += advance
        return self.scorer.run_once()

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def runs_total(self) -> float:
        return sum(
            s.value
            for m in self.registry.collect()
            if m.name == "vigil_runs"
            for s in m.samples
            if s.name == "vigil_runs_total"
        )


def _listener(scorer: KafkaScorer) -> object:
    from scorers.consumer import _Listener

    return _Listener(scorer)


def _runs(n: int, seed: int = 1) -> list[SynthRun]:
    rng = random.Random(seed)
    return [make_run(rng) for _ in range(n)]


class TestCommitProtocol:
    """Offsets are committed only past runs that are durably written."""

    def test_commit_waits_for_write(self) -> None:
        """While a run is assembling its first record's offset is the committed offset; after the write, past it."""
        consumer = FakeConsumer(partitions=1)
        h = Harness(consumer)
        runs = _runs(3)
        for run in runs:
            consumer.append(0, body(list(run.spans)))
        assert 0 == h.tick()
        assert 0 == consumer.committed_offset(0)  # nothing written: the first record is still needed
        assert 3 == h.tick(advance=2.0)
        assert 3 == consumer.committed_offset(0)
        assert {r.trace_id for r in runs} == set(h.sink.runs)
        assert 3 == h.runs_total()

    def test_the_late_cache_age_is_the_shortest_of_the_partitions_keeping_runs(self) -> None:
        """One partition's runs scored at 2 s, the other's at 12 s: at 20 s the gauge reads 8 s (the cache
        that turns over soonest); partitions keeping no run do not pull it to 0."""
        consumer = FakeConsumer(partitions=3)
        h = Harness(consumer)
        first, second = _runs(2)
        assert 0.0 == h.value("vigil_late_cache_age_seconds")
        consumer.append(0, body(list(first.spans)))
        h.tick()
        assert 1 == h.tick(advance=2.0)
        h.tick(advance=8.0)
        consumer.append(1, body(list(second.spans)))
        h.tick()
        assert 1 == h.tick(advance=2.0)
        h.clock.now = 20.0
        assert 8.0 == h.value("vigil_late_cache_age_seconds")

    def test_several_traces_per_record(self) -> None:
        """A record holding many traces yields one run each."""
        consumer = FakeConsumer(partitions=2)
        h = Harness(consumer)
        runs = _runs(6, seed=2)
        consumer.append(1, body([s for r in runs for s in r.spans]))
        h.tick()
        assert 6 == h.tick(advance=2.0)
        assert 6 == len(h.sink.runs)
        assert 1 == consumer.committed_offset(1)


class TestStoreOutage:
    """A failing store pauses consumption; nothing is committed or lost."""

    def test_pause_retry_resume(self) -> None:
        """Writes fail twice: partitions pause, no commit advances, then everything is written once."""
        consumer = FakeConsumer(partitions=2)
        sink = InMemoryRunSink()
        h = Harness(consumer, sink)
        first = _runs(4, seed=3)
        for i, run in enumerate(first):
            consumer.append(i % 2, body(list(run.spans)))
        h.tick()
        sink.fail_next(2, retry_after=0.0)
        h.tick(advance=2.0)
        assert consumer.paused() == consumer.assignment()
        assert 1 == h.value("vigil_consumer_paused")
        commits_during = list(consumer.commits)
        consumer.append(0, body(list(_runs(1, seed=4)[0].spans)))  # arrives while paused: not read
        time.sleep(0.15)  # the first backoff (0.1 s) passes
        h.tick()
        assert commits_during == consumer.commits
        time.sleep(0.25)  # the second backoff (0.2 s) passes
        h.tick()
        assert set() == consumer.paused()
        assert 0 == h.value("vigil_consumer_paused")
        assert {r.trace_id for r in first} == set(sink.runs)
        assert 4 == h.runs_total()
        assert 2 == h.value("vigil_store_write_errors_total")


class TestRedelivery:
    """Re-delivered records never count a run twice."""

    def test_second_scorer_rereads(self) -> None:
        """A new scorer re-reading the partition from 0 rewrites runs but counts none of them."""
        consumer = FakeConsumer(partitions=1)
        sink = InMemoryRunSink()
        first = Harness(consumer, sink)
        for run in _runs(5, seed=5):
            consumer.append(0, body(list(run.spans)))
        first.tick()
        first.tick(advance=2.0)
        assert 5 == first.runs_total()
        replay = FakeConsumer(partitions=1)
        replay.log = consumer.log  # the same partition, read again from offset 0
        second = Harness(replay, sink)
        second.tick()
        assert 5 == second.tick(advance=2.0)
        assert 0 == second.runs_total()
        assert {2} == set(sink.versions.values())
        assert 5 == len(sink.runs)


class TestRebalance:
    """Revoked partitions hand over their state or drop it."""

    def test_assigned_back_keeps_state(self) -> None:
        """A partition revoked and assigned back in one rebalance keeps its in-flight runs."""
        consumer = FakeConsumer(partitions=2)
        h = Harness(consumer)
        run = _runs(1, seed=6)[0]
        consumer.append(0, body(list(run.spans)))
        h.tick()
        h.scorer.revoked(list(consumer.tps))
        h.scorer.assigned([consumer.tps[0]])
        assert 1 == h.tick(advance=2.0)
        assert [run.trace_id] == list(h.sink.runs)

    def test_moved_partition_dropped(self) -> None:
        """A partition that moves away drops its in-flight runs; the safe offset was committed for the new owner."""
        consumer = FakeConsumer(partitions=2)
        h = Harness(consumer)
        consumer.append(1, body(list(_runs(1, seed=7)[0].spans)))
        h.tick()
        h.scorer.revoked(list(consumer.tps))
        h.scorer.assigned([consumer.tps[0]])
        assert 0 == h.tick(advance=2.0)
        assert {} == h.sink.runs
        assert 0 == consumer.committed_offset(1)


class TestMixedRecords:
    """Records holding several traces, or one trace under a foreign key, are re-keyed."""

    @staticmethod
    def _rekey_into(consumer: FakeConsumer, fail: list[bool]) -> Callable[[Sequence[TraceBatch]], None]:
        def rekey(batches: Sequence[TraceBatch]) -> None:
            if fail and fail.pop(0):
                raise RuntimeError("broker down")
            for batch in batches:  # as the producer's partitioner would: by key
                partition = int(batch.trace_id, 16) % len(consumer.tps)
                consumer.append(partition, encode_batch(batch), key=record_key(batch.trace_id))

        return rekey

    def test_trace_split_over_partitions_is_assembled_whole(self) -> None:
        """The spans of each run spread over two unkeyed records in two partitions: one complete run each."""
        consumer = FakeConsumer(partitions=2)
        h = Harness(consumer, rekey=self._rekey_into(consumer, []))
        runs = _runs(6, seed=5)
        halves = [(list(r.spans[: len(r.spans) // 2]), list(r.spans[len(r.spans) // 2 :])) for r in runs]
        consumer.append(0, body([s for first, _ in halves for s in first]))
        consumer.append(1, body([s for _, second in halves for s in second]))
        h.tick()  # re-keys both records
        h.tick()  # assembles the keyed records
        assert 6 == h.tick(advance=2.0)
        assert {r.trace_id: len(r.spans) for r in runs} == {t: s.run.span_count for t, s in h.sink.runs.items()}
        assert 2 == h.value("vigil_consumer_rekeyed_records_total")
        h.tick(advance=2.0)
        assert {0: len(consumer.log[consumer.tps[0]]), 1: len(consumer.log[consumer.tps[1]])} == {
            p: consumer.committed_offset(p) for p in (0, 1)
        }

    def test_keyed_record_is_not_rekeyed(self) -> None:
        """The collector's own records (one trace, keyed by it) are assembled where they are."""
        consumer = FakeConsumer(partitions=1)
        h = Harness(consumer, rekey=self._rekey_into(consumer, []))
        (run,) = _runs(1, seed=6)
        consumer.append(0, body(list(run.spans)), key=record_key(run.trace_id))
        h.tick()
        assert 1 == h.tick(advance=2.0)
        assert (0, 1) == (h.value("vigil_consumer_rekeyed_records_total"), len(consumer.log[consumer.tps[0]]))

    def test_failed_rekey_is_retried_and_holds_the_offset(self) -> None:
        """Kafka refusing the re-publication rewinds to the record; nothing past it is committed."""
        consumer = FakeConsumer(partitions=1)
        h = Harness(consumer, rekey=self._rekey_into(consumer, [True]))
        runs = _runs(2, seed=7)
        consumer.append(0, body([s for r in runs for s in r.spans]))
        h.tick()
        assert (1, 0) == (h.value("vigil_consumer_rekey_errors_total"), h.value("vigil_consumer_rekeyed_records_total"))
        assert consumer.committed_offset(0) in (None, 0)
        h.tick()
        h.tick()
        assert 2 == h.tick(advance=2.0)
        assert {r.trace_id for r in runs} == set(h.sink.runs)
        assert 1 == h.value("vigil_consumer_rekeyed_records_total")


class TestFeedback:
    """User feedback that arrived before a run was scored joins its flag decision."""

    def test_thumbs_down_before_scoring_flags_the_run(self) -> None:
        """The lookup is asked once per tick for the runs about to be scored; a thumbs-down flags."""
        consumer = FakeConsumer(partitions=2)
        runs = _runs(4, seed=8)
        asked: list[list[str]] = []
        down = {"count": 1, "thumbs_down": True, "thumbs_up": False}

        def lookup(trace_ids: Sequence[str]) -> Mapping[str, Mapping[str, object]]:
            asked.append(list(trace_ids))
            return {runs[0].trace_id: down}

        h = Harness(consumer, feedback=lookup)
        for i, run in enumerate(runs):
            consumer.append(i % 2, body(list(run.spans)))
        h.tick()
        assert 4 == h.tick(advance=2.0)
        assert [sorted(r.trace_id for r in runs)] == [sorted(ids) for ids in asked]
        flag = h.sink.runs[runs[0].trace_id].flag
        assert flag is not None
        assert "user_thumbs_down" in flag.reasons
        assert all(
            h.sink.runs[r.trace_id].flag is None or "user_thumbs_down" not in h.sink.runs[r.trace_id].flag.reasons
            for r in runs[1:]
        )
