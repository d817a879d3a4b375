"""Tests of review_queue.feedback: idempotent storage, the join before and after scoring, sticky flags.

Store-level tests run on SQLite and on the local PostgreSQL; the pipeline is the real one.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from collector.model import Span, TraceBatch
from review_queue.errors import InvalidInputError, OverCapacityError
from review_queue.feedback import FeedbackStore, parse_score, summarize
from review_queue.model import FeedbackIn
from review_queue.store import SqlStore
from review_queue.tables import review_events, review_items
from scorers.assemble import ClosedTrace
from scorers.model import Priority
from scorers.pipeline import Pipeline
from scorers.registry import build_chain
from scorers.rules import compile_rules
from tests.support.review_queue import Clock, scored_run

ROOT = "0" * 15 + "1"


CHAIN = build_chain(("max_iterations_hit", "tool_error_rate"))
RULES = compile_rules(None, [name for name, _ in CHAIN])
PIPELINE = Pipeline(CHAIN, RULES, 0.0)


@pytest.fixture
def received() -> list[tuple[str, str]]:
    """(source, kind) of every new feedback."""
    return []


@pytest.fixture
def fb(store: SqlStore, received: list[tuple[str, str]]) -> FeedbackStore:
    """A feedback store with the default rules and no random sample."""
    return FeedbackStore(store.engine, RULES, 0.0, clock=Clock(), on_received=lambda s, k: received.append((s, k)))


def _tid(n: int) -> str:
    return f"{n:032x}"


def _down(trace_id: str, feedback_id: str = "fb-1", source: str = "web") -> FeedbackIn:
    return FeedbackIn(trace_id, "thumbs", 0.0, "wrong answer", source, feedback_id)


def _capped_run(trace_id: str) -> ClosedTrace:
    attrs: dict[str, object] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "support",
        "vigil.max_iterations_hit": True,
    }
    root = Span(trace_id, ROOT, None, "invoke_agent support", start_ns=1, end_ns=10**9, attributes=attrs)  # type: ignore[arg-type]
    return ClosedTrace(trace_id, TraceBatch(trace_id, (root,)).spans, complete=True)


def _items(store: SqlStore) -> list[dict[str, object]]:
    with store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(review_items)).mappings()]


class TestParse:
    """Scores and summaries (pure)."""

    @pytest.mark.parametrize(
        ("score", "expected"),
        [("down", ("thumbs", 0.0)), ("UP", ("thumbs", 1.0)), (False, ("thumbs", 0.0)), (4, ("score", 4.0))],
    )
    def test_parse_score(self, score: object, expected: tuple[str, float]) -> None:
        """Thumbs words and booleans are thumbs; numbers are scores."""
        assert expected == parse_score(score)

    @pytest.mark.parametrize("score", ["meh", None, float("nan"), float("inf"), [1]])
    def test_bad_score(self, score: object) -> None:
        """Anything else is refused with a clear error."""
        with pytest.raises(InvalidInputError):
            parse_score(score)

    def test_summary(self) -> None:
        """The summary aggregates every row; no feedback is an empty map."""
        rows = [
            {"kind": "thumbs", "score": 1.0, "comment": ""},
            {"kind": "score", "score": 3.0, "comment": "meh"},
            {"kind": "thumbs", "score": 0.0, "comment": "bad"},
        ]
        assert {
            "count": 3,
            "thumbs_up": True,
            "thumbs_down": True,
            "min_score": 0.0,
            "max_score": 3.0,
            "mean_score": 4.0 / 3,
            "last_score": 0.0,
            "comments": 2,
        } == summarize(rows)
        assert {} == summarize([])


class TestJoin:
    """Feedback before and after the run ends in one flagged item with both reasons."""

    def test_feedback_before_run(self, store: SqlStore, fb: FeedbackStore) -> None:
        """Thumbs-down first, then the capped run is scored with the looked-up feedback."""
        trace_id = _tid(1)
        result = fb.record(_down(trace_id))
        assert (False, False, None) == (result["duplicate"], result["joined"], result["flag"])
        closed = _capped_run(trace_id)
        scored = PIPELINE.process(closed, fb.summaries([trace_id]).get(trace_id))
        store.write([scored])
        assert 1 == fb.join_pending()
        [item] = _items(store)
        assert ["hit_max_iterations", "user_thumbs_down"] == item["reasons"]
        assert "high" == item["priority"]
        assert item["snapshot"]["span_count"] == 1  # type: ignore[index]
        assert 0 == fb.join_pending()

    def test_feedback_after_run(self, store: SqlStore, fb: FeedbackStore) -> None:
        """The capped run is flagged first; a later thumbs-down adds its reason to the same item."""
        trace_id = _tid(2)
        store.write([PIPELINE.process(_capped_run(trace_id))])
        [before] = _items(store)
        result = fb.record(_down(trace_id))
        assert {"reasons": ["hit_max_iterations", "user_thumbs_down"], "priority": "high"} == result["flag"]
        [item] = _items(store)
        assert before["id"] == item["id"]
        assert ["hit_max_iterations", "user_thumbs_down"] == item["reasons"]
        run = store.get_run(trace_id)
        assert run is not None
        assert ["hit_max_iterations", "user_thumbs_down"] == run["flag"]["reasons"]

    def test_rescore_after_feedback_keeps_reason(self, store: SqlStore, fb: FeedbackStore) -> None:
        """A late-span re-score that looks feedback up keeps user_thumbs_down."""
        trace_id = _tid(3)
        store.write([PIPELINE.process(_capped_run(trace_id))])
        fb.record(_down(trace_id))
        store.write([PIPELINE.process(_capped_run(trace_id), fb.summaries([trace_id])[trace_id])])
        [item] = _items(store)
        assert ["hit_max_iterations", "user_thumbs_down"] == item["reasons"]

    def test_unflagged_run_gets_an_item(self, store: SqlStore, fb: FeedbackStore) -> None:
        """A good run that a user thumbs down after scoring becomes a normal-priority item."""
        trace_id = _tid(4)
        store.write([scored_run(trace_id, agent="support")])
        assert [] == _items(store)
        fb.record(_down(trace_id))
        [item] = _items(store)
        assert (["user_thumbs_down"], "normal", "pending") == (item["reasons"], item["priority"], item["state"])
        assert item["snapshot"]["partial"] is True  # type: ignore[index]
        with store.engine.connect() as conn:
            actions = list(conn.execute(sa.select(review_events.c.action)).scalars())
        assert ["feedback_flag"] == actions

    def test_thumbs_up_does_not_flag(self, store: SqlStore, fb: FeedbackStore) -> None:
        """A thumbs-up or a number joins the run without flagging it."""
        trace_id = _tid(5)
        store.write([scored_run(trace_id)])
        fb.record(FeedbackIn(trace_id, "thumbs", 1.0, "", "web", "up-1"))
        fb.record(FeedbackIn(trace_id, "score", 4.0, "", "web", "num-1"))
        assert [] == _items(store)
        assert 2 == len(fb.for_run(trace_id))

    def test_idempotent_on_feedback_id(
        self, store: SqlStore, fb: FeedbackStore, received: list[tuple[str, str]]
    ) -> None:
        """The same feedback id twice stores and counts one feedback."""
        trace_id = _tid(6)
        store.write([scored_run(trace_id, reasons=["errored"], priority=Priority.NORMAL)])
        first = fb.record(_down(trace_id))
        second = fb.record(_down(trace_id))
        assert (False, True) == (first["duplicate"], second["duplicate"])
        assert 1 == len(fb.for_run(trace_id))
        assert [("web", "thumbs")] == received
        [item] = _items(store)
        assert ["errored", "user_thumbs_down"] == item["reasons"]

    def test_done_item_stays_done(self, store: SqlStore, fb: FeedbackStore) -> None:
        """Feedback after review adds the reason but does not reopen the item."""
        trace_id = _tid(7)
        store.write([scored_run(trace_id, reasons=["errored"])])
        with store.engine.begin() as conn:
            conn.execute(sa.update(review_items).values(state="done"))
        fb.record(_down(trace_id))
        [item] = _items(store)
        assert ("done", ["errored", "user_thumbs_down"]) == (item["state"], item["reasons"])


class TestRedaction:
    """Feedback comments go through the redactor before they are stored."""

    def test_comment_redacted(self, store: SqlStore) -> None:
        """An e-mail address in a comment is never stored."""
        from scorers.redact import Redactor

        fb = FeedbackStore(store.engine, RULES, 0.0, redact=Redactor(("email",), {}).text)
        fb.record(FeedbackIn(_tid(8), "thumbs", 0.0, "mail me at jane@example.com", "web", "r-1"))
        [stored] = fb.for_run(_tid(8))
        assert "jane@example.com" not in stored["comment"]
        assert "REDACTED" in stored["comment"]


class TestPendingBound:
    """Feedback for runs not stored is held within a row bound and a time bound (issue 20 #7)."""

    def test_refused_when_full_and_expired_later(self, store: SqlStore) -> None:
        """Past ``pending_max`` unjoined rows new unknown-run feedback is refused; stored runs and
        duplicates still pass; after ``pending_s`` the held rows are dropped and counted."""
        clock = Clock()
        refused: list[str] = []
        dropped: list[tuple[str, int]] = []
        fb = FeedbackStore(
            store.engine, RULES, 0.0, clock=clock, pending_max=3, pending_s=600.0,
            on_refused=refused.append, on_dropped=lambda r, n: dropped.append((r, n)),
        )  # fmt: skip
        for n in range(3):
            assert not fb.record(_down(_tid(100 + n), f"fb-{n}"))["joined"]
        with pytest.raises(OverCapacityError, match="feedback already wait"):
            fb.record(_down(_tid(200), "fb-over"))
        assert ["pending_full"] == refused
        assert fb.record(_down(_tid(100), "fb-0"))["duplicate"]
        store.write([PIPELINE.process(_capped_run(_tid(300)))])
        assert fb.record(_down(_tid(300), "fb-known"))["joined"]
        clock.now += 601.0
        assert 3 == fb.expire_pending()
        assert [("expired", 3)] == dropped
        assert not fb.record(_down(_tid(201), "fb-after"))["joined"]
