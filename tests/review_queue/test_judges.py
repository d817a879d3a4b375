"""Tests of review_queue.judges (SQL judge sink, verdict pairs) and the judge wiring of ``vigil run``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from collector.demo.fakeopenai import FakeOpenAI, TextTurn, Usage
from collector.otlp import decode_json
from review_queue.api import create_api_app
from review_queue.judges import SqlJudgeSink, SqlVerdictPairSource, merge_reasons
from review_queue.model import ItemState
from review_queue.store import SqlStore
from review_queue.tables import review_items
from scorers.judge.metrics import AgreementCollector
from scorers.judge.model import JudgeResult, VerdictPair
from scorers.model import Flag, Priority, RunStatus
from tests.support.review_queue import scored_run
from vigil.run import build
from vigil.settings import Settings

JUDGE_FLAG = Flag(("judge_ground",), Priority.NORMAL, 0.05)


def _tid(n: int) -> str:
    return f"{n:032x}"


def _result(n: int, score: float | None = 0.2, judge: str = "ground", **extra: object) -> JudgeResult:
    passed = None if score is None else score >= 0.5
    return JudgeResult(_tid(n), judge, "groundedness@1", "judge-model", score, passed, "<b>unsupported</b>", **extra)  # type: ignore[arg-type]


class TestSqlJudgeSink:
    """Verdicts stored with the run; judge flags merged into the run and its review item."""

    def test_result_is_stored_and_served(self, store: SqlStore) -> None:
        """The verdict appears under judges in the run detail, and an upsert replaces it."""
        store.write([scored_run(_tid(1))])
        sink = SqlJudgeSink(store.engine)
        assert sink.write_judgement(_result(1, input_tokens=300, cost_usd=0.01), scored_run(_tid(1)), None) is False
        sink.write_judgement(_result(1, 0.9), scored_run(_tid(1)), None)
        run = store.get_run(_tid(1))
        assert run is not None
        (judge,) = run["judges"]
        assert ("ground", 0.9, True, "groundedness@1", "judge-model") == (
            judge["judge"],
            judge["score"],
            judge["passed"],
            judge["rubric_version"],
            judge["model"],
        )
        assert run["flag"] is None

    def test_failing_verdict_revokes_a_completion_once(self, store: SqlStore) -> None:
        """The first failing verdict on a completed run revokes it; a second judge, a pass or an errored run do not."""
        revoked: list[str] = []
        sink = SqlJudgeSink(store.engine, on_completion_revoked=revoked.append)
        done = scored_run(_tid(1), agent="support", final_output="ok")
        errored = scored_run(_tid(2), agent="billing", errored=True, status=RunStatus.ERROR)
        store.write([done, errored])
        sink.write_judgement(_result(1, 0.9), done, None)
        sink.write_judgement(_result(1, 0.1), done, None)
        sink.write_judgement(_result(1, 0.2, judge="other"), done, None)
        sink.write_judgement(_result(1, 0.1), done, None)  # the same judge again
        sink.write_judgement(_result(2, 0.1), errored, None)
        assert ["support"] == revoked

    def test_error_result(self, store: SqlStore) -> None:
        """A judge error is stored with NULL score and pass."""
        store.write([scored_run(_tid(1))])
        SqlJudgeSink(store.engine).write_judgement(
            _result(1, None, error="malformed: score: Input should be a valid number"), scored_run(_tid(1)), None
        )
        (judge,) = (store.get_run(_tid(1)) or {})["judges"]
        assert (None, None) == (judge["score"], judge["passed"])
        assert judge["error"].startswith("malformed")

    def test_late_flag_creates_the_review_item(self, store: SqlStore) -> None:
        """An unflagged run flagged by its judge: flag columns set, pending review item created, new flag."""
        scored = scored_run(_tid(1), agent="support", final_output="ok")
        store.write([scored])
        assert SqlJudgeSink(store.engine).write_judgement(_result(1), scored, JUDGE_FLAG) is True
        run = store.get_run(_tid(1))
        assert run is not None
        assert {"reasons": ["judge_ground"], "priority": "normal", "sample_rate": 0.05} == run["flag"]
        assert run["review_item"]["state"] == ItemState.PENDING
        assert ["judge_ground"] == run["review_item"]["reasons"]
        assert 2 == run["version"]
        queue, _ = store.list_queue()
        assert [_tid(1)] == [item["trace_id"] for item in queue]

    def test_flagged_run_gains_the_reason(self, store: SqlStore) -> None:
        """On a flagged run the judge reason is appended, the higher priority kept, the item state kept."""
        scored = scored_run(_tid(1), reasons=["hit_max_iterations"], priority=Priority.HIGH)
        store.write([scored])
        with store.engine.begin() as conn:
            conn.execute(sa.update(review_items).values(state="claimed"))
        assert SqlJudgeSink(store.engine).write_judgement(_result(1), scored, JUDGE_FLAG) is False
        run = store.get_run(_tid(1))
        assert run is not None
        assert ["hit_max_iterations", "judge_ground"] == run["flag"]["reasons"]
        assert "high" == run["flag"]["priority"]
        assert ("claimed", ["hit_max_iterations", "judge_ground"]) == (
            run["review_item"]["state"],
            run["review_item"]["reasons"],
        )

    def test_nothing_new_writes_nothing(self, store: SqlStore) -> None:
        """A decision whose reasons are already recorded leaves the run untouched."""
        scored = scored_run(_tid(1), reasons=["judge_ground"])
        store.write([scored])
        assert SqlJudgeSink(store.engine).write_judgement(_result(1), scored, JUDGE_FLAG) is False
        assert 1 == (store.get_run(_tid(1)) or {})["version"]

    def test_stream_rescore_keeps_the_judge_flag(self, store: SqlStore) -> None:
        """A later re-score without a flag keeps the judge's flag (sticky)."""
        scored = scored_run(_tid(1))
        store.write([scored])
        SqlJudgeSink(store.engine).write_judgement(_result(1), scored, JUDGE_FLAG)
        store.write([scored_run(_tid(1))])
        assert ["judge_ground"] == (store.get_run(_tid(1)) or {})["flag"]["reasons"]


class TestMergeReasons:
    """The pure flag merge."""

    def test_union_and_priority(self) -> None:
        """New reasons are appended; the higher priority wins; nothing new gives None."""
        assert (["a", "judge_x"], Priority.HIGH) == merge_reasons(
            ["a"], "high", Flag(("judge_x",), Priority.NORMAL, 0.0)
        )
        assert (["judge_x"], Priority.NORMAL) == merge_reasons([], None, Flag(("judge_x",), Priority.NORMAL, 0.0))
        assert merge_reasons(["judge_x"], "low", Flag(("judge_x",), Priority.NORMAL, 0.0)) is None


class TestApi:
    """GET /api/v1/runs/{trace_id} shows the judges."""

    def test_judges_field(self, store: SqlStore) -> None:
        """The run detail carries judges with score, reasoning (as data), model, rubric version and cost."""
        store.write([scored_run(_tid(1))])
        SqlJudgeSink(store.engine).write_judgement(_result(1, cost_usd=0.002), scored_run(_tid(1)), None)
        store.write([scored_run(_tid(2))])
        client = TestClient(create_api_app(store, admin_token=None))
        body = client.get(f"/api/v1/runs/{_tid(1)}").json()
        (judge,) = body["judges"]
        assert {
            "judge": "ground",
            "score": 0.2,
            "passed": False,
            "reasoning": "<b>unsupported</b>",
        }.items() <= judge.items()
        assert 0.002 == judge["cost_usd"]
        assert "agent" in body
        assert [] == client.get(f"/api/v1/runs/{_tid(2)}").json()["judges"]
        schema = client.get("/openapi.json").json()["components"]["schemas"]
        assert "judges" in schema["RunDetailOut"]["properties"]

    def test_agreement_endpoint(self, store: SqlStore) -> None:
        """GET /api/v1/judges/agreement serves the figures; an undefined kappa is null, not NaN."""
        from scorers.judge.model import Agreement

        figures = [
            Agreement("ground", "groundedness@1", 4, 3, 0.75, 0.5),
            Agreement("safety", "safety@1", 2, 2, 1.0, float("nan")),
        ]
        client = TestClient(create_api_app(store, admin_token="t", judge_agreement=lambda: figures))
        assert 401 == client.get("/api/v1/judges/agreement").status_code
        body = client.get("/api/v1/judges/agreement", headers={"Authorization": "Bearer t"}).json()
        assert [0.5, None] == [row["cohen_kappa"] for row in body]
        assert {"judge": "ground", "rubric_version": "groundedness@1", "n": 4, "agreed": 3}.items() <= body[0].items()
        assert 404 == TestClient(create_api_app(store, admin_token=None)).get("/api/v1/judges/agreement").status_code


class TestVerdictPairs:
    """Judge verdicts paired with a human verdicts table (created here as the workbench would)."""

    def _human(self, store: SqlStore, rows: list[tuple[str, str, float]]) -> None:
        with store.engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE verdicts (trace_id VARCHAR(32), verdict VARCHAR(8), created_at FLOAT)"))
            insert = sa.text("INSERT INTO verdicts VALUES (:t, :v, :c)")
            for t, v, c in rows:
                conn.execute(insert, {"t": t, "v": v, "c": c})

    def test_pairs_and_gauges(self, store: SqlStore) -> None:
        """Only runs with both verdicts pair up; errors are skipped; the gauges show rate and kappa."""
        sink = SqlJudgeSink(store.engine)
        for n, score in [(1, 0.9), (2, 0.1), (3, 0.9), (4, 0.1), (5, None), (6, 0.9)]:
            store.write([scored_run(_tid(n))])
            sink.write_judgement(_result(n, score), scored_run(_tid(n)), None)
        self._human(
            store,
            [
                (_tid(1), "pass", 1),
                (_tid(2), "fail", 1),
                (_tid(3), "fail", 1),
                (_tid(4), "fail", 1),
                (_tid(5), "pass", 1),
            ],
        )
        source = SqlVerdictPairSource(store.engine)
        assert sorted(
            [
                VerdictPair("ground", "groundedness@1", True, True),
                VerdictPair("ground", "groundedness@1", False, False),
                VerdictPair("ground", "groundedness@1", True, False),
                VerdictPair("ground", "groundedness@1", False, False),
            ],
            key=repr,
        ) == sorted(source.verdict_pairs(), key=repr)
        registry = CollectorRegistry()
        registry.register(AgreementCollector(source))
        labels = {"judge": "ground", "rubric_version": "groundedness@1"}
        assert 0.75 == registry.get_sample_value("vigil_judge_agreement_rate", labels)
        assert pytest.approx(0.5) == registry.get_sample_value("vigil_judge_cohen_kappa", labels)

    def test_latest_human_verdict_wins(self, store: SqlStore) -> None:
        """With latest_column, a re-review replaces the earlier human verdict."""
        store.write([scored_run(_tid(1))])
        SqlJudgeSink(store.engine).write_judgement(_result(1, 0.9), scored_run(_tid(1)), None)
        self._human(store, [(_tid(1), "fail", 1.0), (_tid(1), "pass", 2.0)])
        source = SqlVerdictPairSource(store.engine, latest_column="created_at")
        assert [VerdictPair("ground", "groundedness@1", True, True)] == source.verdict_pairs()

    def test_missing_table_is_empty(self, store: SqlStore) -> None:
        """Before the workbench's table exists there are no pairs (and no error)."""
        assert [] == SqlVerdictPairSource(store.engine).verdict_pairs()


class TestEmbeddedJudges:
    """``vigil run`` wiring: stream → store → judge → store, flagged by the judge's score."""

    def test_late_flag_through_the_pipeline(self, tmp_path: Path) -> None:
        """A run nothing flags is judged (low groundedness), stored with its verdict and flagged judge_ground."""
        verdict = TextTurn(json.dumps({"reasoning": "Unsupported refund.", "score": 0.1}), Usage(300, 40))
        with FakeOpenAI({"low": [verdict]}) as fake:
            config = tmp_path / "vigil.yaml"
            judges = {
                "ground": {
                    "rubric": "groundedness",
                    "model": "judge-model",
                    "base_url": fake.base_url,
                    "api_key_env": "JUDGE_KEY",
                    "select": "true",
                    "flag_below": 0.5,
                }
            }
            config.write_text(json.dumps({"judges": judges, "sample_rate": 0.0}))
            settings = Settings.load({}, {"database_url": f"sqlite:///{tmp_path / 'v.db'}"}, config_file=config)
            registry = CollectorRegistry()
            emb = build(settings, registry, environ={"JUDGE_KEY": "sk-test"})
            assert emb.judges is not None
            emb.judges.start()
            trace_id = "ab" * 16
            emb.stream.publish(decode_json(json.dumps(_otlp(trace_id)).encode()).batches)
            assert emb.worker.shutdown(30)
            assert emb.judges.flush(30)
            emb.judges.shutdown(5)
            run = emb.store.get_run(trace_id)
            emb.store.close()
        assert run is not None
        assert ["judge_ground"] == run["flag"]["reasons"]
        assert 0.1 == run["judges"][0]["score"]
        assert 1 == registry.get_sample_value("vigil_flagged_runs_total", {"agent": "support", "priority": "normal"})
        assert 1 == registry.get_sample_value("vigil_judge_requests_total", {"judge": "ground", "outcome": "ok"})

    def test_bad_judge_refuses_to_start(self, tmp_path: Path) -> None:
        """A judge whose key variable is missing fails build() naming the judge."""
        from scorers.errors import JudgeConfigError

        config = tmp_path / "vigil.yaml"
        config.write_text(json.dumps({"judges": {"j": {"rubric": "safety", "model": "m", "api_key_env": "NOPE"}}}))
        settings = Settings.load({}, {"database_url": f"sqlite:///{tmp_path / 'v.db'}"}, config_file=config)
        with pytest.raises(JudgeConfigError, match="'j'"):
            build(settings, environ={})


def _otlp(trace_id: str) -> dict[str, object]:
    """One finished OTLP/JSON agent run with captured output (the fake picks its verdict by the marker)."""

    def attr(key: str, value: str) -> dict[str, object]:
        return {"key": key, "value": {"stringValue": value}}

    root = {
        "traceId": trace_id,
        "spanId": "1" * 16,
        "name": "invoke_agent support",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [
            attr("gen_ai.operation.name", "invoke_agent"),
            attr("gen_ai.agent.name", "support"),
            attr("output.value", "[[scenario:low]] Your refund of $500 was issued."),
        ],
    }
    return {
        "resourceSpans": [
            {"resource": {"attributes": [attr("service.name", "bot")]}, "scopeSpans": [{"spans": [root]}]}
        ]
    }
