"""Test kit for sessions: scored turns whose chat span carries the conversation so far, and the
``sessions`` row a test fixes by hand (the scorer's aggregate, when the test is about reading it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from review_queue.session_close import SessionCloser, compile_session_rules
from review_queue.store import SqlStore
from review_queue.tables import sessions
from scorers.model import Message, RunStatus, ScoredRun, Step, StepKind
from tests.support.review_queue import scored_run

__all__ = ["T0", "S", "chat_turns", "flagged_session", "put_session"]

S = 1_000_000_000
"""One second in nanoseconds."""
T0 = 1_700_000_000 * S
"""The first turn's start."""


def _messages(pairs: Sequence[tuple[str, str]]) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]} for role, text in pairs])


def chat_turns(
    session_id: str,
    exchanges: Sequence[tuple[str, str]],
    *,
    first: int = 1,
    user_id: str | None = "user-1",
    flagged: Sequence[int] = (),
    gap_s: int = 30,
) -> list[ScoredRun]:
    """One scored run per ``(user message, answer)``, in order, ``gap_s`` apart: a conversation.

    Each turn's chat span carries the whole conversation so far as its input (OTel GenAI
    ``gen_ai.input.messages``), as chat instrumentations record it, and the answer as its output.
    Trace ids are ``first``, ``first + 1`` … as 32 hex digits; turns numbered in ``flagged`` (1 =
    first) are flagged ``errored``.
    """
    history: list[tuple[str, str]] = []
    out = []
    for n, (user, answer) in enumerate(exchanges, 1):
        start = T0 + (n - 1) * gap_s * S
        history.append(("user", user))
        trace_id = f"{first + n - 1:032x}"
        span = f"{first + n - 1:015x}"
        steps = (
            Step(span + "1", None, "invoke_agent support", StepKind.AGENT, start, start + 2 * S),
            Step(
                span + "2",
                span + "1",
                "chat gpt-4o-mini",
                StepKind.LLM,
                start + S // 10,
                start + S,
                attributes={
                    "gen_ai.input.messages": _messages(history),
                    "gen_ai.output.messages": _messages([("assistant", answer)]),
                },
            ),
        )
        out.append(
            scored_run(
                trace_id,
                reasons=["errored"] if n in flagged else [],
                agent="support",
                session_id=session_id,
                user_id=user_id,
                start_ns=start,
                end_ns=start + 2 * S,
                llm_calls=1,
                steps=steps,
                messages=(Message("user", user),),
                final_output=answer,
                errored=n in flagged,
                status=RunStatus.ERROR if n in flagged else RunStatus.OK,
            )
        )
        history.append(("assistant", answer))
    return out


def put_session(store: SqlStore, session_id: str, **fields: Any) -> None:
    """Write (replace) the ``sessions`` row of ``session_id`` with ``fields`` over neutral defaults."""
    row: dict[str, Any] = {
        "session_id": session_id, "agent": "support", "user_id": None, "first_ns": 0, "last_ns": 0, "turns": 1,
        "duration_s": 0.0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "turns_flagged": 0,
        "limit_hits": 0, "blocks": 0, "errors": 0, "thumbs_down": 0, "signals": [], "status": "open",
        "closed_at": None, "updated_at": 1.0,
    }  # fmt: skip
    row.update(fields)
    with store.engine.begin() as conn:
        conn.execute(sa.delete(sessions).where(sessions.c.session_id == session_id))
        conn.execute(sa.insert(sessions), [row])


def flagged_session(store: SqlStore, session_id: str, exchanges: Sequence[tuple[str, str]], *, first: int = 1) -> int:
    """Write the conversation (:func:`chat_turns`, idle since 2023), close it with a rule flagging
    every session, and return its review item: the session item of its last turn."""
    store.write(chat_turns(session_id, exchanges, first=first))
    closer = SessionCloser(store, compile_session_rules({"every_session": {"expr": "turns >= 1"}}))
    assert session_id in {c.row["session_id"] for c in closer.close_idle()}
    run = store.get_run(f"{first + len(exchanges) - 1:032x}")
    assert run is not None
    assert run["review_item"] is not None
    return int(run["review_item"]["id"])
