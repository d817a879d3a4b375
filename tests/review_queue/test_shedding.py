"""Tests of review_queue.shedding: random-sample flags are shed first when the queue is over capacity."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from prometheus_client import CollectorRegistry

from review_queue.shedding import SampleShedder, pending_items
from review_queue.store import SqlStore, upgrade_database
from scorers.model import Priority, SampleDesign, ScoredRun
from scorers.rules import sample_design
from tests.support.review_queue import InMemoryRunSink, scored_run


class Pending:
    def __init__(self) -> None:
        self.count = 0
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.count


def _shed(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("vigil_review_shed_total", {"reason": "random_sample"})


def test_sample_only_flags_are_shed_over_capacity() -> None:
    """Over capacity: sample-only runs are written unflagged and counted; rule-flagged runs keep their flag."""
    inner, pending, registry = InMemoryRunSink(), Pending(), CollectorRegistry()
    now = [0.0]
    sink = SampleShedder(inner, pending, 10, registry, refresh_s=5.0, clock=lambda: now[0])
    sample = scored_run("a" * 32, reasons=["random_sample"], priority=Priority.LOW)
    sink.write([sample])
    assert ["a" * 32] == inner.flagged()
    pending.count = 11
    sink.write([scored_run("b" * 32, reasons=["random_sample"], priority=Priority.LOW)])
    assert "b" * 32 in inner.flagged()  # the count read at t=0 (under capacity) is still trusted
    now[0] = 5.0
    both = scored_run("c" * 32, reasons=["errored", "random_sample"], priority=Priority.NORMAL)
    sink.write([scored_run("d" * 32, reasons=["random_sample"], priority=Priority.LOW), both])
    assert ["a" * 32, "b" * 32, "c" * 32] == inner.flagged()
    assert "d" * 32 in inner.runs
    assert inner.runs["d" * 32].flag is None
    assert 1.0 == _shed(registry)
    assert 2 == pending.reads


def test_batches_without_sample_flags_never_read_the_count() -> None:
    """No sample-only flag and no sample design in a batch: no database read at all."""
    inner, pending = InMemoryRunSink(), Pending()
    sink = SampleShedder(inner, pending, 1, CollectorRegistry(), refresh_s=0.0)
    sink.write([scored_run("e" * 32, reasons=["errored"]), scored_run("f" * 32)])
    assert 0 == pending.reads


def test_capacity_zero_never_sheds() -> None:
    """Capacity 0 disables shedding."""
    inner, pending = InMemoryRunSink(), Pending()
    pending.count = 10**6
    SampleShedder(inner, pending, 0, CollectorRegistry()).write([scored_run("1" * 32, reasons=["random_sample"])])
    assert ["1" * 32] == inner.flagged()


def test_pending_items_counts_the_real_queue(tmp_path: Path) -> None:
    """The default pending count reads review_items on the store's database."""
    url = f"sqlite:///{tmp_path / 'v.db'}"
    upgrade_database(url)
    store = SqlStore(url)
    store.write([scored_run(f"{n:032x}", reasons=["random_sample"]) for n in range(1, 4)])
    assert 3 == pending_items(store.engine)
    registry = CollectorRegistry()
    sink = SampleShedder(store, lambda: pending_items(store.engine), 2, registry, refresh_s=0.0)
    sink.write([scored_run(f"{9:032x}", reasons=["random_sample"])])
    assert 3 == pending_items(store.engine)
    assert 1.0 == _shed(registry)
    store.close()


def _designed(trace_id: str, reasons: list[str], rate: float = 1.0) -> ScoredRun:
    scored = scored_run(
        trace_id, reasons=reasons, priority=Priority.LOW if reasons == ["random_sample"] else Priority.HIGH
    )
    return dataclasses.replace(scored, design=sample_design(trace_id, rate, scored.flag))


def test_shedding_suspends_the_random_stratum_for_every_run() -> None:
    """Over capacity every run is written with rate 0 and shed=True — rule-flagged ones too — so the
    stratum stays independent of the rules; under capacity the design passes through unchanged."""
    inner, pending = InMemoryRunSink(), Pending()
    sink = SampleShedder(inner, pending, 10, CollectorRegistry(), refresh_s=0.0)
    calm = _designed("1" * 32, ["random_sample"])
    sink.write([calm])
    assert SampleDesign(1.0, True, False, False) == inner.runs["1" * 32].design
    pending.count = 11
    sink.write([_designed("2" * 32, ["random_sample"]), _designed("3" * 32, ["errored", "random_sample"]),
                _designed("4" * 32, [])])  # fmt: skip
    assert SampleDesign(0.0, False, False, True) == inner.runs["2" * 32].design
    assert inner.runs["2" * 32].flag is None
    assert SampleDesign(0.0, False, True, True) == inner.runs["3" * 32].design
    assert ("errored", "random_sample") == inner.runs["3" * 32].flag.reasons  # type: ignore[union-attr]
    assert SampleDesign(0.0, False, False, True) == inner.runs["4" * 32].design
