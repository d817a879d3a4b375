"""Tests of review_queue.retention: the retention period and deletion requests, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from review_queue.feedback import FeedbackStore
from review_queue.model import FeedbackIn, VerdictIn, VerdictValue
from review_queue.retention import Retention, apply_retention, deletion_counter, purge_traces
from review_queue.store import SqlStore
from review_queue.tables import feedback, judge_results, review_events, review_items, review_verdicts, runs
from review_queue.workbench import Workbench
from scorers.rules import compile_rules
from tests.support.review_queue import T0, Clock, scored_run
from vigil.cli import EXIT_CONFIG, main

DAY = 86_400.0
TABLES = (runs, review_items, review_verdicts, review_events, feedback, judge_results)


def _tid(n: int) -> str:
    return f"{n:032x}"


class World:
    """Runs of three ages: 40 days old and reviewed (1), 40 days old and pending (2), 1 day old (3)."""

    def __init__(self, url: str) -> None:
        self.clock = Clock()
        self.store = SqlStore(url, clock=self.clock)
        self.engine = self.store.engine
        bench = Workbench(self.engine, clock=self.clock)
        fb = FeedbackStore(self.engine, compile_rules(None), 0.0, clock=self.clock)
        for n in (1, 2):
            self.store.write([scored_run(_tid(n), reasons=["errored"], agent="a")])
            fb.record(FeedbackIn(_tid(n), "thumbs", 0.0, "bad", "web", f"fb{n}"))
            self._judge(n)
        claim = bench.claim_next("alice")
        assert claim is not None
        assert _tid(1) == claim.trace_id
        bench.submit_verdict(claim.item_id, "alice", VerdictIn(VerdictValue.FAIL, ("loop",)))
        self.clock.now = T0 + 39 * DAY
        self.store.write([scored_run(_tid(3), reasons=["errored"], agent="a")])
        fb.record(FeedbackIn(_tid(3), "thumbs", 0.0, "bad", "web", "fb3"))
        self._judge(3)
        self.clock.now = T0 + 40 * DAY

    def _judge(self, n: int) -> None:
        row = {
            "trace_id": _tid(n), "judge": "g", "rubric_version": "g@1", "model": "m", "score": 0.2, "passed": False,
            "reasoning": "r", "error": None, "input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0,
            "latency_s": 0.1, "content_hash": "h", "cached": False, "created_at": self.clock.now,
            "updated_at": self.clock.now,
        }  # fmt: skip
        with self.engine.begin() as conn:
            conn.execute(sa.insert(judge_results), [row])

    def traces(self, table: sa.Table) -> set[str]:
        with self.engine.connect() as conn:
            if "trace_id" in table.c:
                return {r[0] for r in conn.execute(sa.select(table.c.trace_id))}
            joined = sa.select(review_items.c.trace_id).join(table, table.c.item_id == review_items.c.id)
            return {r[0] for r in conn.execute(joined)}


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    w = World(database_url)
    yield w
    w.store.close()


class TestRetention:
    """Old runs go with everything hanging off them; reviewed ones stay by default."""

    def test_old_unreviewed_runs_are_deleted(self, world: World) -> None:
        """After 30 days the pending run 2 is gone from every table; reviewed 1 and young 3 stay."""
        counts = apply_retention(world.engine, now=world.clock(), days=30)
        assert {_tid(1), _tid(3)} == world.traces(runs)
        assert {_tid(1), _tid(3)} == world.traces(review_items)
        assert {_tid(1), _tid(3)} == world.traces(feedback)
        assert {_tid(1), _tid(3)} == world.traces(judge_results)
        assert {_tid(1)} == world.traces(review_verdicts)
        assert (1, 1, 1, 1) == (counts["runs"], counts["review_items"], counts["feedback"], counts["judge_results"])

    def test_reviewed_runs_go_too_when_the_policy_says_so(self, world: World) -> None:
        """keep_reviewed=False deletes the reviewed run, its verdict and its audit trail."""
        apply_retention(world.engine, now=world.clock(), days=30, keep_reviewed=False)
        assert {_tid(3)} == world.traces(runs)
        assert set() == world.traces(review_verdicts)
        assert _tid(1) not in world.traces(review_events)

    def test_feedback_for_runs_that_never_came_expires(self, world: World) -> None:
        """Feedback about an unknown trace is kept within the period, deleted after it."""
        fb = FeedbackStore(world.engine, compile_rules(None), 0.0, clock=world.clock)
        fb.record(FeedbackIn(_tid(9), "thumbs", 0.0, "never scored", "web", "fb9"))
        apply_retention(world.engine, now=world.clock(), days=30)
        assert _tid(9) in world.traces(feedback)
        apply_retention(world.engine, now=world.clock() + 31 * DAY, days=30)
        assert _tid(9) not in world.traces(feedback)

    def test_thread_counts_deletions_in_metrics(self, world: World) -> None:
        """One Retention pass feeds vigil_retention_deleted_rows_total{table}."""
        registry = CollectorRegistry()
        Retention(world.engine, days=30, clock=world.clock, on_deleted=deletion_counter(registry)).tick()
        assert 1.0 == registry.get_sample_value("vigil_retention_deleted_rows_total", {"table": "runs"})
        assert 0.0 == registry.get_sample_value("vigil_retention_deleted_rows_total", {"table": "review_verdicts"})


class TestPurge:
    """Deletion requests remove every row about a trace, reviewed or not."""

    def test_purge_removes_everything(self, world: World) -> None:
        """Purging the reviewed run 1 leaves nothing of it in any table; others untouched."""
        counts = purge_traces(world.engine, [_tid(1).upper()])
        for table in TABLES:
            assert _tid(1) not in world.traces(table), table.name
        assert {_tid(2), _tid(3)} == world.traces(runs)
        assert 1 == counts["review_verdicts"]
        assert counts["review_events"] >= 2  # claim and verdict at least

    def test_cli(self, world: World, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """``vigil purge --trace-id`` prints what it deleted; a malformed id exits 2."""
        cfg = tmp_path / "purge.yaml"
        cfg.write_text(json.dumps({"database_url": database_url}))
        assert 0 == main(["--config", str(cfg), "purge", "--trace-id", _tid(2), "--trace-id", _tid(3)])
        out = json.loads(capsys.readouterr().out)
        assert (2, 2) == (out["trace_ids"], out["deleted"]["runs"])
        assert {_tid(1)} == world.traces(runs)
        assert EXIT_CONFIG == main(["--config", str(cfg), "purge", "--trace-id", "nope"])
        assert "not a trace id" in capsys.readouterr().err
