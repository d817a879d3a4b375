"""Session signals on conversations captured from real frameworks (tests/fixtures/traces/*_sessions).

Each driver ran scripted multi-turn conversations through its framework's own instrumentation
against the scripted model server and recorded, per conversation, the turns where the user re-asked
or asked for a human and whether the conversation was abandoned after a failed, blocked or cut-off
turn. The captured traces are normalised, written to the store (SQLite and PostgreSQL), the sessions
closed, and every session's signals must be exactly the driver's; a thumbs-down sent after a
conversation closed reaches it as that turn's signal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from collector.model import Span
from collector.otlp import decode_json
from review_queue.feedback import FeedbackStore
from review_queue.model import FeedbackIn
from review_queue.session_close import SessionCloser
from review_queue.store import SqlStore
from review_queue.tables import sessions
from scorers.model import ScoredRun
from scorers.normalise import normalise
from tests.support.review_queue import Clock

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
STACKS = sorted(
    p.name.removesuffix(".truth.json") for p in FIXTURES.glob("*.truth.json") if "sessions" in json.loads(p.read_text())
)


def _traces(stack: str) -> dict[str, list[Span]]:
    traces: dict[str, list[Span]] = {}
    for batch in decode_json((FIXTURES / f"{stack}.json").read_bytes()).batches:
        traces.setdefault(batch.trace_id, []).extend(batch.spans)
    return traces


def _signals_by_session(rows: list[Any]) -> dict[str, dict[str, Any]]:
    """The driver's shape: 0-based turns of ``reask`` and ``human_request``, ``abandoned`` as a bool."""
    out = {}
    for row in rows:
        signals = row["signals"]
        out[row["session_id"]] = {
            "reask": sorted(s["turn"] - 1 for s in signals if s["signal"] == "reask"),
            "human_request": sorted(s["turn"] - 1 for s in signals if s["signal"] == "human_request"),
            "abandoned": any(s["signal"] == "abandoned" for s in signals),
        }
    return out


def _unobservable(stack: str, truth: dict[str, Any]) -> set[tuple[str, int, str]]:
    """(session id, 0-based turn, fact) the driver recorded that the trace cannot show: the
    ``session.<signal>`` facts of ``unobservable.json`` (a framework that records no message content)
    and ``user_id`` (one that puts the user id on no span)."""
    facts = json.loads((FIXTURES / "unobservable.json").read_text()).get(stack, {})
    return {
        (run["session_id"], run["turn"], field.removeprefix("session."))
        for run in truth["runs"]
        for field in facts.get(run["scenario"], {})
        if field.startswith("session.") or field == "user_id"
    }


def test_three_frameworks_recorded_conversations() -> None:
    assert len(STACKS) >= 3, STACKS


@pytest.mark.parametrize("stack", STACKS)
def test_signals_equal_the_drivers(stack: str, database_url: str) -> None:
    truth = json.loads((FIXTURES / f"{stack}.truth.json").read_text())
    traces = _traces(stack)
    runs = [normalise(traces[r["trace_id"]]) for r in truth["runs"]]
    clock = Clock(max(run.end_ns for run in runs) / 1e9)
    store = SqlStore(database_url, clock=clock)
    try:
        for run in runs:  # one turn per write, as they arrive
            store.write([ScoredRun(run=run, scores={}, flag=None)])
        clock.now += store.sessions.config.idle_s + 1
        closed = SessionCloser(store, (), clock=clock).close_idle()
        # the conversations, and a lone run's own session when its framework names one (PydanticAI does)
        lone = {run.session_id for run, r in zip(runs, truth["runs"], strict=True) if r["turn"] is None}
        assert {s["session_id"] for s in truth["sessions"]} | (lone - {None}) == {c.row["session_id"] for c in closed}
        with store.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(sa.select(sessions)).mappings()]
    finally:
        store.close()
    got = {sid: signals for sid, signals in _signals_by_session(rows).items() if sid not in lone}
    hidden = _unobservable(stack, truth)
    want = {
        s["session_id"]: {
            "reask": sorted(t for t in s["signals"]["reask"] if (s["session_id"], t, "reask") not in hidden),
            "human_request": sorted(
                t for t in s["signals"]["human_request"] if (s["session_id"], t, "human_request") not in hidden
            ),
            "abandoned": s["signals"]["abandoned"],
        }
        for s in truth["sessions"]
    }
    assert want == got
    by_session = {row["session_id"]: row for row in rows}
    for session in truth["sessions"]:
        row = by_session[session["session_id"]]
        turns = [r for r in truth["runs"] if r["session_id"] == session["session_id"]]
        user_shown = not any((session["session_id"], t["turn"], "user_id") in hidden for t in turns)
        assert (len(session["traces"]), session["user_id"] if user_shown else None) == (row["turns"], row["user_id"])
        assert sum(t["input_tokens"] for t in turns) == row["input_tokens"]
        for signal in row["signals"]:  # evidence names the turn's trace and a span of it
            assert session["traces"][signal["turn"] - 1] == signal["trace_id"]
            assert signal["span_id"] in {s.span_id for s in traces[signal["trace_id"]]}


@pytest.mark.parametrize("stack", STACKS)
def test_a_late_thumbs_down_reaches_the_closed_session(stack: str, database_url: str) -> None:
    """The user's thumbs-down on an earlier turn, sent after the conversation closed (as a feedback
    widget does), becomes the session's ``thumbs_down`` signal on that turn, and nothing else moves."""
    truth = json.loads((FIXTURES / f"{stack}.truth.json").read_text())
    traces = _traces(stack)
    runs = [normalise(traces[r["trace_id"]]) for r in truth["runs"]]
    clock = Clock(max(run.end_ns for run in runs) / 1e9)
    store = SqlStore(database_url, clock=clock)
    session = truth["sessions"][0]
    first_turn = session["traces"][0]
    try:
        store.write([ScoredRun(run=run, scores={}, flag=None) for run in runs])
        clock.now += store.sessions.config.idle_s + 1
        SessionCloser(store, (), clock=clock).close_idle()
        with store.engine.connect() as conn:
            before = (
                conn.execute(sa.select(sessions).where(sessions.c.session_id == session["session_id"])).mappings().one()
            )
        feedback = FeedbackStore(store.engine, (), 0.0, clock=clock, sessions=store)
        feedback.record(FeedbackIn(first_turn, "thumbs", 0.0, "wrong answer", "app", f"fb-{stack}"))
        with store.engine.connect() as conn:
            after = (
                conn.execute(sa.select(sessions).where(sessions.c.session_id == session["session_id"])).mappings().one()
            )
    finally:
        store.close()
    downs = [(s["trace_id"], s["turn"]) for s in after["signals"] if s["signal"] == "thumbs_down"]
    assert [(first_turn, 1)] == downs
    assert (0, 1) == (before["thumbs_down"], after["thumbs_down"])
    assert "closed" == after["status"]
    assert list(before["signals"]) == [s for s in after["signals"] if s["signal"] != "thumbs_down"]
