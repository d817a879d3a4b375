"""Tests of review_queue.export and ``vigil export``: passed runs and corrected failures become eval cases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from review_queue.app.cli import main
from review_queue.export import eval_case, eval_set, export_cases
from review_queue.model import VerdictIn, VerdictValue
from review_queue.store import SqlStore, upgrade_database
from review_queue.workbench import Workbench
from scorers.model import Message, ToolCall
from tests.support.review_queue import scored_run


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A migrated SQLite URL."""
    database = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(database)
    return database


@pytest.fixture
def store(url: str) -> Iterator[SqlStore]:
    """The store."""
    sql_store = SqlStore(url)
    yield sql_store
    sql_store.close()


def _reviewed(store: SqlStore, n: int, verdict: VerdictIn, **fields: object) -> None:
    run: dict[str, object] = {
        "agent": "support",
        "messages": (Message("user", f"question {n}"), Message("assistant", "let me look")),
        "tools": (ToolCall("s1", "search", "call_1", '{"q": "refunds"}', "3 results", None),),
        "final_output": f"answer {n}",
    }
    run.update(fields)
    store.write([scored_run(f"{n:032x}", reasons=["r"], **run)])  # type: ignore[arg-type]
    bench = Workbench(store.engine)
    claim = bench.claim_next("alice")
    assert claim is not None
    bench.submit_verdict(claim.item_id, "alice", verdict)


class TestExport:
    """Which runs become cases, and their shape."""

    def test_cases(self, store: SqlStore) -> None:
        """Pass → own answer and trajectory; corrected fail → corrected answer; uncorrected fail skipped."""
        _reviewed(store, 1, VerdictIn(VerdictValue.PASS))
        _reviewed(store, 2, VerdictIn(VerdictValue.FAIL, ("hallucination",), "", "the right answer"))
        _reviewed(store, 3, VerdictIn(VerdictValue.FAIL, ("wrong_tool",), "", "use the refunds tool"))
        _reviewed(store, 4, VerdictIn(VerdictValue.FAIL, ("loop",)))
        _reviewed(store, 5, VerdictIn(VerdictValue.PASS), messages=())
        store.write([scored_run(f"{6:032x}", reasons=["r"])])  # pending: not exported
        result = export_cases(store.engine)
        assert {"failed_without_correction": 1, "no_user_message": 1} == result.skipped
        first, second, third = result.cases
        invocation = first["conversation"][0]
        assert f"{1:032x}" == first["eval_id"]
        assert {"role": "user", "parts": [{"text": "question 1"}]} == invocation["user_content"]
        assert {"role": "model", "parts": [{"text": "answer 1"}]} == invocation["final_response"]
        assert [{"id": "call_1", "name": "search", "args": {"q": "refunds"}}] == invocation["intermediate_data"][
            "tool_uses"
        ]
        assert "support" == first["session_input"]["app_name"]
        assert "the right answer" == second["conversation"][0]["final_response"]["parts"][0]["text"]
        assert 1 == len(second["conversation"][0]["intermediate_data"]["tool_uses"])
        assert [] == third["conversation"][0]["intermediate_data"]["tool_uses"]  # the tools were blamed

    def test_agent_filter(self, store: SqlStore) -> None:
        """--agent keeps one agent's runs."""
        _reviewed(store, 1, VerdictIn(VerdictValue.PASS))
        _reviewed(store, 2, VerdictIn(VerdictValue.PASS), agent="billing")
        assert [f"{2:032x}"] == [c["eval_id"] for c in export_cases(store.engine, agent="billing").cases]

    def test_non_json_arguments(self) -> None:
        """Arguments that are not a JSON object are kept under 'input'."""
        snapshot = {"trace_id": "t", "messages": [{"role": "user", "content": "q"}], "final_output": "a",
                    "tools": [{"name": "calc", "span_id": "s", "call_id": None, "arguments": "2+2"}]}  # fmt: skip
        case, _ = eval_case(snapshot, [{"verdict": "pass"}], 0.0)
        assert case is not None
        assert {"input": "2+2"} == case["conversation"][0]["intermediate_data"]["tool_uses"][0]["args"]

    def test_empty_arguments(self) -> None:
        """Empty captured arguments export as no arguments, as ``vigil eval`` reads them from a run."""
        snapshot = {"trace_id": "t", "messages": [{"role": "user", "content": "q"}], "final_output": "a",
                    "tools": [{"name": "now", "span_id": "s", "call_id": None, "arguments": ""}]}  # fmt: skip
        case, _ = eval_case(snapshot, [{"verdict": "pass"}], 0.0)
        assert case is not None
        assert {} == case["conversation"][0]["intermediate_data"]["tool_uses"][0]["args"]

    def test_cli_formats(self, store: SqlStore, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """vigil export writes an EvalSet document or one case per line."""
        _reviewed(store, 1, VerdictIn(VerdictValue.PASS))
        _reviewed(store, 2, VerdictIn(VerdictValue.PASS))
        monkeypatch.setenv("VIGIL_DATABASE_URL", url)
        monkeypatch.chdir(tmp_path)
        assert 0 == main(["export", "--format", "evalset", "-o", "set.json", "--eval-set-id", "prod_week_1"])
        doc = json.loads((tmp_path / "set.json").read_text())
        assert ("prod_week_1", 2) == (doc["eval_set_id"], len(doc["eval_cases"]))
        assert set(eval_set([], "x", 0.0)) == set(doc)
        assert 0 == main(["export", "--format", "jsonl", "-o", "cases.jsonl"])
        lines = (tmp_path / "cases.jsonl").read_text().splitlines()
        assert [f"{1:032x}", f"{2:032x}"] == [json.loads(line)["eval_id"] for line in lines]
