"""Tests of review_queue.metrics: counters from the workbench and feedback, gauges computed at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from review_queue.feedback import FeedbackStore
from review_queue.metrics import QueueCollector, ReviewMetrics
from review_queue.model import FeedbackIn, VerdictIn, VerdictValue
from review_queue.store import SqlStore, upgrade_database
from review_queue.workbench import Workbench
from scorers.model import Priority
from scorers.rules import compile_rules
from tests.support.review_queue import Clock, scored_run


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[SqlStore]:
    """A migrated SQLite store."""
    url = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(url)
    sql_store = SqlStore(url, clock=clock)
    yield sql_store
    sql_store.close()


class TestReviewMetrics:
    """Counters and scrape-time gauges."""

    def test_counters_and_gauges(self, store: SqlStore, clock: Clock) -> None:
        """Claims, expiries, verdicts, pass rate, depth and oldest age all show up under their names."""
        registry = CollectorRegistry()
        metrics = ReviewMetrics(registry, max_agents=1)
        registry.register(QueueCollector(store.engine, clock=clock, max_agents=1))
        bench = Workbench(store.engine, clock=clock, lease_s=10, observer=metrics)
        store.write([scored_run(f"{n:032x}", reasons=["r"], priority=Priority.HIGH, agent="support") for n in range(3)])
        clock.now += 100
        store.write([scored_run(f"{9:032x}", reasons=["r"], priority=Priority.LOW, agent="billing")])
        for verdict in (VerdictValue.PASS, VerdictValue.FAIL):
            claim = bench.claim_next("alice")
            assert claim is not None
            bench.submit_verdict(claim.item_id, "alice", VerdictIn(verdict))
        bench.claim_next("alice")
        clock.now += 11
        bench.expire_leases()
        clock.now += 9
        value = registry.get_sample_value
        assert 3.0 == value("vigil_review_claims_total")
        assert 1.0 == value("vigil_review_lease_expiries_total")
        assert 1.0 == value("vigil_review_verdicts_total", {"agent": "support", "verdict": "pass"})
        assert 1.0 == value("vigil_review_verdicts_total", {"agent": "support", "verdict": "fail"})
        assert 0.5 == value("vigil_review_pass_rate", {"agent": "support"})
        assert 1.0 == value("vigil_review_items", {"state": "pending", "priority": "high"})
        assert 2.0 == value("vigil_review_items", {"state": "done", "priority": "high"})
        assert 1.0 == value("vigil_review_items", {"state": "pending", "priority": "low"})
        assert 0.0 == value("vigil_review_items", {"state": "claimed", "priority": "normal"})
        assert 120.0 == value("vigil_review_oldest_pending_age_seconds", {"priority": "high"})
        assert 20.0 == value("vigil_review_oldest_pending_age_seconds", {"priority": "low"})
        assert 0.0 == value("vigil_review_oldest_pending_age_seconds", {"priority": "normal"})
        clock.now += 5  # computed at scrape time: the age moves without any write
        assert 125.0 == value("vigil_review_oldest_pending_age_seconds", {"priority": "high"})

    def test_feedback_counter_caps_sources(self, store: SqlStore) -> None:
        """New feedback is counted by source and kind; sources past the cap are 'other'; duplicates not."""
        registry = CollectorRegistry()
        metrics = ReviewMetrics(registry, max_sources=1)
        fb = FeedbackStore(store.engine, compile_rules(None), 0.0, on_received=metrics.feedback_received)
        fb.record(FeedbackIn("a" * 32, "thumbs", 0.0, "", "web", "1"))
        fb.record(FeedbackIn("a" * 32, "thumbs", 0.0, "", "web", "1"))
        fb.record(FeedbackIn("a" * 32, "score", 3.0, "", "slack", "2"))
        assert 1.0 == registry.get_sample_value("vigil_feedback_received_total", {"source": "web", "kind": "thumbs"})
        assert 1.0 == registry.get_sample_value("vigil_feedback_received_total", {"source": "other", "kind": "score"})

    def test_pass_rate_overflow(self, store: SqlStore, clock: Clock) -> None:
        """Agents past the cap fold into 'other' in the pass-rate gauge."""
        registry = CollectorRegistry()
        registry.register(QueueCollector(store.engine, clock=clock, max_agents=1))
        bench = Workbench(store.engine, clock=clock)
        for n, agent in enumerate(("a", "a", "b", "c")):
            store.write([scored_run(f"{n:032x}", reasons=["r"], agent=agent)])
            claim = bench.claim_next("rev")
            assert claim is not None
            bench.submit_verdict(
                claim.item_id, "rev", VerdictIn(VerdictValue.PASS if agent != "c" else VerdictValue.FAIL)
            )
        assert 1.0 == registry.get_sample_value("vigil_review_pass_rate", {"agent": "a"})
        assert 0.5 == registry.get_sample_value("vigil_review_pass_rate", {"agent": "other"})

    def test_scrape_survives_outage(self) -> None:
        """A scrape with the database down yields no review gauges instead of failing."""
        down = SqlStore("postgresql+psycopg://postgres@127.0.0.1:1/test")
        registry = CollectorRegistry()
        registry.register(QueueCollector(down.engine))
        assert b"vigil_review_items{" not in generate_latest(registry)
        down.close()
