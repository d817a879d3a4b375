"""Tests of review_queue.export and ``vigil export``: passed runs and corrected failures become eval cases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from review_queue.details import DetailsWriter
from review_queue.export import eval_case, eval_set, export_cases
from review_queue.model import VerdictIn, VerdictTarget, VerdictValue
from review_queue.privacy import RedactingSink
from review_queue.session_close import SessionCloser, compile_session_rules
from review_queue.store import SqlStore, upgrade_database
from review_queue.workbench import Workbench
from scorers.eval.model import parse_eval_set
from scorers.model import Message, ToolCall
from scorers.redact import Redactor
from tests.support.review_queue import Clock, scored_run
from tests.support.sessions import chat_turns
from vigil.cli import main


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


EXCHANGES = [
    ("My order 4411 is late, mail me at jane@example.com", "It shipped yesterday."),
    ("When will it arrive?", "Thursday."),
    ("Can I change the address?", "No, it is on its way."),
    ("Cancel it then.", "Done, cancelled."),
]


@pytest.fixture
def any_store(database_url: str, clock: Clock) -> Iterator[SqlStore]:
    """A store on SQLite and on PostgreSQL (the conftest's migrated databases)."""
    sql_store = SqlStore(database_url, clock=clock)
    yield sql_store
    sql_store.close()


def _stored_session(store: SqlStore, session_id: str, *, flagged: tuple[int, ...] = ()) -> int:
    """The conversation written as the pipeline writes it (redacted runs and details), closed and flagged
    by a rule taking every session; returns the session's review item (its last turn's)."""
    redactor = Redactor(("email",), {})
    turns = chat_turns(session_id, EXCHANGES, flagged=flagged)
    RedactingSink(store, redactor).write(turns)
    DetailsWriter(store.write_details, redactor).write_now(turns)
    closer = SessionCloser(store, compile_session_rules({"every": {"expr": "turns >= 1"}}))
    assert [session_id] == [c.row["session_id"] for c in closer.close_idle()]
    run = store.get_run(f"{len(EXCHANGES):032x}")
    assert run is not None
    assert run["review_item"] is not None
    return int(run["review_item"]["id"])


def _judge(bench: Workbench, item: int, reviewer: str, verdict: VerdictIn) -> None:
    bench.claim(item, reviewer)
    bench.submit_verdict(item, reviewer, verdict)


def _turn(n: int, verdict: VerdictValue, corrected: str | None = None, *categories: str) -> VerdictIn:
    return VerdictIn(verdict, categories, "", corrected, VerdictTarget.TURN, f"{n:032x}")


def _said(case: dict[str, object]) -> list[tuple[str, str]]:
    return [
        (inv["user_content"]["parts"][0]["text"], inv["final_response"]["parts"][0]["text"])  # type: ignore[index]
        for inv in case["conversation"]  # type: ignore[attr-defined]
    ]


class TestTurnVerdicts:
    """A verdict on one turn of a stored session is exported as a multi-turn case: the turns up to it."""

    def test_turn_two_of_four(self, any_store: SqlStore) -> None:
        """Turn 2 failed with a correction, turn 1 passed (another reviewer), the session failed (a third):
        one case per judged turn, its history before it, the verdict's answer last; redacted; the session
        verdict exports nothing."""
        item = _stored_session(any_store, "conv-t")
        bench = Workbench(any_store.engine)
        bench.set_reviews_required(item, "admin", 3)
        _judge(bench, item, "alice", _turn(2, VerdictValue.FAIL, "It arrives Friday.", "hallucination"))
        _judge(bench, item, "bob", _turn(1, VerdictValue.PASS))
        _judge(bench, item, "carol", VerdictIn(VerdictValue.FAIL, ("gave_up",)))
        result = export_cases(any_store.engine)
        assert {} == result.skipped
        cases = {c["eval_id"]: c for c in result.cases}
        assert [f"{2:032x}", f"{1:032x}"] == list(cases)  # verdict order within the item
        redacted = "My order 4411 is late, mail me at [REDACTED:email]"
        assert [(redacted, "It shipped yesterday."), ("When will it arrive?", "It arrives Friday.")] == _said(
            cases[f"{2:032x}"]
        )
        assert [(redacted, "It shipped yesterday.")] == _said(cases[f"{1:032x}"])
        assert [f"vigil-{n:032x}" for n in (1, 2)] == [
            inv["invocation_id"] for inv in cases[f"{2:032x}"]["conversation"]
        ]
        assert "jane@example.com" not in json.dumps(result.cases)
        assert "support" == cases[f"{2:032x}"]["session_input"]["app_name"]
        parsed = parse_eval_set(eval_set(result.cases, "s", 1.0))  # valid ADK EvalSet
        assert [2, 1] == [len(c.turns) for c in parsed.eval_cases]

    def test_history_verdicts_apply(self, any_store: SqlStore) -> None:
        """An earlier turn failed without a correction (its own run item) makes a later turn's case unfit;
        with a correction, the history carries the corrected answer."""
        item = _stored_session(any_store, "conv-h", flagged=(2,))
        own = any_store.get_run(f"{2:032x}")
        assert own is not None
        assert own["review_item"] is not None
        turn_two = int(own["review_item"]["id"])
        bench = Workbench(any_store.engine)
        _judge(bench, turn_two, "alice", VerdictIn(VerdictValue.FAIL, ("hallucination",)))
        _judge(bench, item, "bob", _turn(3, VerdictValue.PASS))
        result = export_cases(any_store.engine)
        assert [] == result.cases
        assert {"failed_without_correction": 2} == result.skipped  # turn 2's own case, and turn 3's history

    def test_run_verdict_on_a_later_turn_gets_its_history(self, any_store: SqlStore) -> None:
        """A run verdict on turn 3's own item (a flagged turn, not the session's item) exports turns 1-3; the
        session item's last-turn verdict exports the whole conversation."""
        item = _stored_session(any_store, "conv-r", flagged=(3,))
        own = any_store.get_run(f"{3:032x}")
        assert own is not None
        assert own["review_item"] is not None
        bench = Workbench(any_store.engine)
        _judge(bench, int(own["review_item"]["id"]), "alice", VerdictIn(VerdictValue.FAIL, ("wrong_tool",), "", "Yes."))
        _judge(bench, item, "bob", _turn(4, VerdictValue.PASS))
        cases = {c["eval_id"]: c for c in export_cases(any_store.engine).cases}
        assert ["Yes."] == [_said(cases[f"{3:032x}"])[-1][1]]
        assert 3 == len(cases[f"{3:032x}"]["conversation"])
        assert [a for _, a in _said(cases[f"{4:032x}"])] == [
            "It shipped yesterday.",
            "Thursday.",
            "Yes.",
            "Done, cancelled.",
        ]
