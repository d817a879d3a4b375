"""``vigil eval add --from-session``: a stored session as one multi-turn eval case, redacted as stored
(review_queue.export_session, vigil.eval_session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from review_queue.details import DetailsWriter
from review_queue.export_session import case_from_session, session_case
from review_queue.model import VerdictIn, VerdictTarget, VerdictValue
from review_queue.privacy import RedactingSink
from review_queue.session_close import SessionCloser, compile_session_rules
from review_queue.store import SqlStore, upgrade_database
from review_queue.workbench import Workbench
from scorers.eval.model import load_eval_set
from scorers.redact import Redactor
from tests.support.sessions import chat_turns
from vigil.cli import main

EXCHANGES = [
    ("My order 4411 is late, mail me at jane@example.com", "It shipped yesterday."),
    ("When will it arrive?", "Thursday."),
    ("Cancel it then.", "Done, cancelled."),
]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, SqlStore]:
    """vigil.yaml on a migrated SQLite store; the store."""
    cfg = tmp_path / "vigil.yaml"
    url = f"sqlite:///{tmp_path / 'vigil.db'}"
    cfg.write_text(f"database_url: {url}\n")
    upgrade_database(url)
    return cfg, SqlStore(url)


def _store_session(store: SqlStore, session_id: str, *, details: bool = True, flagged: tuple[int, ...] = ()) -> None:
    """The session's turns written as the pipeline writes them: redacted runs, redacted details."""
    redactor = Redactor(("email",), {})
    turns = chat_turns(session_id, EXCHANGES, flagged=flagged)
    RedactingSink(store, redactor).write(turns)
    if details:
        DetailsWriter(store.write_details, redactor).write_now(turns)


class TestFromSession:
    def test_turns_in_order_redacted(self, setup: tuple[Path, SqlStore], capsys: pytest.CaptureFixture[str]) -> None:
        """One case, one invocation per turn in order: each turn's own user message (not the history),
        its answer; the e-mail redacted; a second add is a duplicate."""
        cfg, store = setup
        _store_session(store, "conv-9")
        target = tmp_path_of(cfg) / "cases.json"
        assert 0 == main(["--config", str(cfg), "eval", "add", str(target), "--from-session", "conv-9"])
        assert "(3 turns)" in capsys.readouterr().err
        (case,) = load_eval_set(target).eval_cases
        assert "conv-9" == case.eval_id
        assert [
            ("My order 4411 is late, mail me at [REDACTED:email]", "It shipped yesterday."),
            ("When will it arrive?", "Thursday."),
            ("Cancel it then.", "Done, cancelled."),
        ] == [(t.user_text, t.expected_response) for t in case.turns]
        assert "jane@example.com" not in target.read_text()  # stored redacted, so the case is too
        assert [f"vigil-{n:032x}" for n in (1, 2, 3)] == [t.invocation_id for t in case.turns]
        assert 0 == main(["--config", str(cfg), "eval", "add", str(target), "--from-session", "conv-9"])
        assert "already has this case" in capsys.readouterr().err
        assert 1 == len(load_eval_set(target).eval_cases)
        tagged = tmp_path_of(cfg) / "tagged.json"
        args = ["eval", "add", str(tagged), "--from-session", "conv-9", "--dimension", "robustness", "--tag", "prod"]
        assert 0 == main(["--config", str(cfg), *args])
        (case,) = load_eval_set(tagged).eval_cases
        assert case.metadata is not None
        assert ("robustness", ["prod"]) == (case.metadata.dimension, case.metadata.tags)
        store.close()

    def test_corrected_turn_and_snapshot_fallback(self, setup: tuple[Path, SqlStore]) -> None:
        """Without details, a flagged turn reads its review snapshot; a failed verdict's corrected answer
        replaces the turn's answer. A turn with no stored content makes the session unfit."""
        cfg, store = setup
        _store_session(store, "conv-c", details=False, flagged=(1, 2, 3))
        bench = Workbench(store.engine)
        for n in range(3):
            claim = bench.claim_next("alice")
            assert claim is not None
            corrected = "It ships Friday." if n == 1 else None
            verdict = VerdictValue.FAIL if corrected else VerdictValue.PASS
            bench.submit_verdict(claim.item_id, "alice", VerdictIn(verdict, (), "", corrected))
        target = tmp_path_of(cfg) / "c.json"
        assert 0 == main(["--config", str(cfg), "eval", "add", str(target), "--from-session", "conv-c"])
        (case,) = load_eval_set(target).eval_cases
        assert ["It shipped yesterday.", "It ships Friday.", "Done, cancelled."] == [
            t.expected_response for t in case.turns
        ]
        _store_session(store, "conv-hole", details=False, flagged=(1, 3))
        store.close()

    def test_verdicts_on_the_session_item(self, setup: tuple[Path, SqlStore]) -> None:
        """A turn verdict on the session's item corrects that turn; a failed session with no corrected turn is unfit."""
        _, store = setup
        _store_session(store, "conv-tv")
        closer = SessionCloser(store, compile_session_rules({"every": {"expr": "turns >= 1"}}))
        assert ["conv-tv"] == [c.row["session_id"] for c in closer.close_idle()]
        item = int(store.get_run(f"{3:032x}")["review_item"]["id"])  # type: ignore[index]
        bench = Workbench(store.engine)
        bench.set_reviews_required(item, "admin", 2)
        bench.claim(item, "alice")
        bench.submit_verdict(item, "alice", VerdictIn(VerdictValue.FAIL, ("gave_up",)))
        assert (None, "session failed without a corrected turn (give the failing turn a verdict with the answer)") == (
            case_from_session(store.engine, "conv-tv", 1.0)
        )
        bench.claim(item, "bob")
        turn = VerdictIn(VerdictValue.FAIL, (), "", "It ships Friday.", VerdictTarget.TURN, f"{2:032x}")
        bench.submit_verdict(item, "bob", turn)
        case, _ = case_from_session(store.engine, "conv-tv", 1.0)
        assert case is not None
        assert ["It shipped yesterday.", "It ships Friday.", "Done, cancelled."] == [
            t["final_response"]["parts"][0]["text"] for t in case["conversation"]
        ]
        store.close()

    @pytest.mark.parametrize(
        ("session_id", "says"),
        [("nope", "no stored run has this session id"), ("conv-hole", "turn 2: no stored content")],
    )
    def test_unfit_sessions_refused(
        self, setup: tuple[Path, SqlStore], capsys: pytest.CaptureFixture[str], session_id: str, says: str
    ) -> None:
        """An unknown session, or one whose turn 2 has no stored content: exit 1, one line naming why, no file."""
        cfg, store = setup
        _store_session(store, "conv-hole", details=False, flagged=(1, 3))
        target = tmp_path_of(cfg) / "x.json"
        assert 1 == main(["--config", str(cfg), "eval", "add", str(target), "--from-session", session_id])
        err = capsys.readouterr().err.strip()
        assert says in err
        assert 1 == len(err.splitlines())
        assert not target.exists()
        store.close()

    def test_run_and_session_are_exclusive(self, setup: tuple[Path, SqlStore]) -> None:
        """--from-run and --from-session together (or neither) is a usage error."""
        cfg, store = setup
        store.close()
        with pytest.raises(SystemExit) as both:
            main(["--config", str(cfg), "eval", "add", "x.json", "--from-run", "ab" * 16, "--from-session", "s"])
        with pytest.raises(SystemExit) as neither:
            main(["--config", str(cfg), "eval", "add", "x.json"])
        assert (2, 2) == (both.value.code, neither.value.code)


class TestSessionCase:
    """review_queue.export_session.session_case, pure."""

    def test_tools_of_the_turn_only_and_blamed_tools_dropped(self) -> None:
        """A turn's tool calls are the ones it made; a failed verdict blaming the tools empties them."""
        previous = [{"kind": "message", "role": "user", "content": "q1"}, {"kind": "final", "content": "a1"}]
        second = [
            {"kind": "message", "role": "user", "content": "q1"},
            {"kind": "message", "role": "assistant", "content": "a1"},
            {"kind": "message", "role": "user", "content": "q2"},
            {"kind": "tool", "name": "lookup", "call_id": "c1", "arguments": '{"id": 7}', "span_id": "s"},
            {"kind": "message", "role": "assistant", "content": "a2", "final": True},
        ]
        turns = [
            {"trace_id": "t1", "agent": "a", "conversation": previous, "snapshot": None, "verdicts": []},
            {"trace_id": "t2", "agent": "a", "conversation": second, "snapshot": None, "verdicts": []},
        ]
        case, why = session_case("s", turns, 1.0)
        assert "" == why
        assert case is not None
        assert [[], [{"id": "c1", "name": "lookup", "args": {"id": 7}}]] == [
            inv["intermediate_data"]["tool_uses"] for inv in case["conversation"]
        ]
        assert ["q1", "q2"] == [inv["user_content"]["parts"][0]["text"] for inv in case["conversation"]]
        blamed = {"verdict": "fail", "categories": ["wrong_tool"], "corrected_answer": "a2 fixed"}
        case, _ = session_case("s", [turns[0], {**turns[1], "verdicts": [blamed]}], 1.0)
        assert case is not None
        assert [] == case["conversation"][1]["intermediate_data"]["tool_uses"]
        assert "a2 fixed" == case["conversation"][1]["final_response"]["parts"][0]["text"]
        uncorrected = {"verdict": "fail", "categories": []}
        assert (None, "turn 2: failed without a corrected answer") == session_case(
            "s", [turns[0], {**turns[1], "verdicts": [uncorrected]}], 1.0
        )

    def test_snapshot_turn(self) -> None:
        """A turn with only a review snapshot: its last user message, final output and tools."""
        snapshot = {
            "messages": [{"role": "user", "content": "q"}],
            "final_output": "a",
            "tools": [{"name": "t", "call_id": "c", "arguments": "{}", "span_id": "s"}],
        }
        case, _ = session_case("s", [{"trace_id": "t", "agent": "a", "conversation": None, "snapshot": snapshot,
                                      "verdicts": []}], 1.0)  # fmt: skip
        assert case is not None
        assert [{"id": "c", "name": "t", "args": {}}] == case["conversation"][0]["intermediate_data"]["tool_uses"]


def tmp_path_of(cfg: Path) -> Path:
    """The test's directory (where vigil.yaml is)."""
    return cfg.parent
