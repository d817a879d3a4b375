"""A stored session as one multi-turn eval case (``vigil eval add --from-session ID``).

The case is Google ADK's ``EvalCase`` (:mod:`scorers.eval.model`): its ``conversation`` holds one
invocation per turn, in start order, so the turns share the case as a multi-turn conversation
does in ``vigil eval run`` (each turn is run with the history of the ones before). Per turn:

* ``user_content``: the user message the turn added to the conversation (the messages of the
  turns before it, which each chat call repeats, are left out: :func:`review_queue.session_queries
  .fresh_entries`); the last one when it added several;
* ``final_response``: the run's final answer, or a reviewer's corrected answer when a verdict
  failed the turn with one (:func:`review_queue.export.eval_case`'s rule) — a verdict on the turn's own
  item, or a turn verdict on the session's item;
* ``intermediate_data.tool_uses``: the tool calls of the turn (left empty when a verdict blamed the
  tools).

Content comes only from what Vigil stored, which was redacted before it was written: the run's
details document (:mod:`review_queue.details`), else its review snapshot. A turn with neither
(its details not kept, never flagged), with no user message, or failed by a reviewer without a
correction makes the whole session unfit: a conversation with a hole is not a test case. So does a
failing verdict on the whole session unless a turn of it was corrected.

``vigil export`` builds the same shape for a verdict on one turn (:func:`case_up_to_turn`): the
session's turns up to and including the judged one, the turns before it as the history, the judged
turn last with its verdict's outcome; the case's id is that turn's trace id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from review_queue import details
from review_queue.model import VerdictTarget
from review_queue.session_queries import MAX_TURNS, fresh_entries
from review_queue.tables import review_items, review_verdicts, run_details, runs, verdict_run
from review_queue.trajectory import TOOL_CATEGORIES, tool_uses
from scorers.eval.actual import decode_args

__all__ = ["UNFIT", "case_from_session", "case_up_to_turn", "session_case"]


def case_from_session(engine: Engine, session_id: str, created: float) -> tuple[dict[str, Any] | None, str]:
    """The stored session ``session_id`` as one EvalCase, or ``(None, why_not)``.

    ``why_not`` is ``unknown_session``, ``too_many_turns`` (over
    :data:`review_queue.session_queries.MAX_TURNS`), or ``turn N: <reason>`` (see
    :func:`session_case`).
    """
    with engine.connect() as conn:
        rows = _turn_rows(conn, session_id)
        if len(rows) > MAX_TURNS:
            return None, "too_many_turns"
        verdicts, session_failed = _turn_verdicts(conn, rows)
    if not rows:
        return None, "unknown_session"
    return session_case(session_id, _turns(rows, verdicts), created, session_failed=session_failed)


def case_up_to_turn(
    conn: sa.Connection, session_id: str, trace_id: str, created: float
) -> tuple[dict[str, Any] | None, str]:
    """The turns of session ``session_id`` up to and including the run ``trace_id``, as one EvalCase with
    that run's trace id as its id, or ``(None, reason code)`` (``vigil export`` of a verdict on one turn).

    The turns before it are the case's history, the turn itself its last invocation: its answer, or
    the corrected answer of a verdict that failed it. Verdicts on the whole session are not read: they
    name no turn (a reviewer who blamed a turn gave it a verdict). Reason codes: ``unknown_session``
    (the run is not among the session's turns), ``too_many_turns``, and :data:`UNFIT`'s.
    """
    rows = _turn_rows(conn, session_id)
    position = next((n for n, r in enumerate(rows, 1) if r["trace_id"] == trace_id), None)
    if position is None:
        return None, "too_many_turns" if len(rows) > MAX_TURNS else "unknown_session"
    if position > MAX_TURNS:
        return None, "too_many_turns"
    prefix = rows[:position]
    verdicts, _ = _turn_verdicts(conn, prefix)
    case, unfit = _case(trace_id, _turns(prefix, verdicts), created, session_failed=False)
    return case, unfit[1] if unfit is not None else ""


def _turn_rows(conn: sa.Connection, session_id: str) -> list[sa.RowMapping]:
    """The session's turns in start order (at most ``MAX_TURNS + 1``), each with its item and details."""
    query = (
        sa.select(
            runs.c.trace_id,
            runs.c.agent,
            review_items.c.id.label("item_id"),
            review_items.c.snapshot,
            run_details.c.body,
            run_details.c.codec,
        )
        .select_from(
            runs.outerjoin(review_items, review_items.c.trace_id == runs.c.trace_id).outerjoin(
                run_details, run_details.c.trace_id == runs.c.trace_id
            )
        )
        .where(runs.c.session_id == session_id)
        .order_by(runs.c.start_ns, runs.c.trace_id)
        .limit(MAX_TURNS + 1)
    )
    return list(conn.execute(query).mappings().all())


def _turns(rows: Sequence[sa.RowMapping], verdicts: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        {
            "trace_id": r["trace_id"],
            "agent": r["agent"],
            "conversation": _conversation(r),
            "snapshot": r["snapshot"],
            "verdicts": verdicts.get(r["trace_id"], []),
        }
        for r in rows
    ]


def _turn_verdicts(conn: sa.Connection, rows: Sequence[sa.RowMapping]) -> tuple[dict[str, list[dict[str, Any]]], bool]:
    """The verdicts applying to each turn (its own item's, and turn verdicts on the session item), by trace
    id, and whether a verdict on the whole session failed it (:data:`review_queue.tables.verdict_run`)."""
    trace_ids = [r["trace_id"] for r in rows]
    item_ids = [int(r["item_id"]) for r in rows if r["item_id"] is not None]
    found: dict[str, list[dict[str, Any]]] = {}
    applies = verdict_run.label("applies_to")
    query = sa.select(review_verdicts, applies).where(verdict_run.in_(trace_ids)).order_by(review_verdicts.c.id)
    for row in conn.execute(query).mappings():
        found.setdefault(str(row["applies_to"]), []).append(dict(row))
    failed = sa.select(review_verdicts.c.id).where(
        review_verdicts.c.item_id.in_(item_ids),
        review_verdicts.c.target == VerdictTarget.SESSION.value,
        review_verdicts.c.verdict == "fail",
    )
    return found, bool(item_ids) and conn.execute(failed.limit(1)).first() is not None


def _conversation(row: sa.RowMapping) -> list[dict[str, Any]] | None:
    if row["body"] is None:
        return None
    doc = details.decode(row["body"], row["codec"])
    conversation = doc.get("conversation")
    return conversation if isinstance(conversation, list) else None


UNFIT: dict[str, str] = {
    "no_stored_content": "no stored content (its details were not kept and it was never flagged)",
    "no_user_message": "no user message",
    "failed_without_correction": "failed without a corrected answer",
}
"""Why a turn makes its conversation unfit as a case: reason code → the words ``vigil eval add`` prints."""

SESSION_FAILED = "session failed without a corrected turn (give the failing turn a verdict with the answer)"


def session_case(
    session_id: str, turns: Sequence[Mapping[str, Any]], created: float, *, session_failed: bool = False
) -> tuple[dict[str, Any] | None, str]:
    """One EvalCase from a session's turns, in order, or ``(None, "turn N: reason")``. Pure.

    Args:
        session_id: the case id.
        turns: per turn ``{trace_id, agent, conversation (details entries or None), snapshot (or
            None), verdicts}``; a turn's verdicts are the ones applying to its run.
        created: the invocations' and the case's ``creation_timestamp``.
        session_failed: a reviewer failed the whole session. Its answers are then not expected
            behaviour unless a turn verdict corrected one: without, the session is unfit
            (``session failed without a corrected turn``).

    Reasons: ``no stored content`` (no details document, no snapshot), ``no user message``,
    ``failed without a corrected answer`` (:data:`UNFIT`).
    """
    case, unfit = _case(session_id, turns, created, session_failed=session_failed)
    if unfit is None:
        return case, ""
    number, code = unfit
    return None, SESSION_FAILED if code == "session_failed" else f"turn {number}: {UNFIT.get(code, code)}"


def _case(
    eval_id: str, turns: Sequence[Mapping[str, Any]], created: float, *, session_failed: bool
) -> tuple[dict[str, Any] | None, tuple[int, str] | None]:
    """:func:`session_case` with the unfit turn's number and reason code (``session_failed``,
    ``unknown_session`` for no turns, or a key of :data:`UNFIT`) instead of a message."""
    corrected_turn = any(v.get("corrected_answer") for t in turns for v in t["verdicts"] if v["verdict"] == "fail")
    if session_failed and not corrected_turn:
        return None, (0, "session_failed")
    invocations = []
    previous: Sequence[Mapping[str, Any]] = []
    for number, turn in enumerate(turns, 1):
        conversation = turn["conversation"]
        snapshot = turn["snapshot"] or {}
        if conversation is not None and any(e.get("kind") == "message" for e in conversation):
            fresh, _ = fresh_entries(previous, conversation)
            user = _last(fresh, "user") or _last(conversation, "user")
            answer = _answer(conversation)
            tools = _details_tools(fresh)
            previous = conversation
        elif snapshot and not snapshot.get("partial"):  # a partial snapshot (summary only) holds no content
            user = _last(snapshot.get("messages") or [], "user")
            answer = str(snapshot.get("final_output") or "")
            tools = tool_uses(snapshot)
            previous = []
        else:
            return None, (number, "no_stored_content")
        if not user:
            return None, (number, "no_user_message")
        failed = [v for v in turn["verdicts"] if v["verdict"] == "fail"]
        corrected = [v for v in failed if v.get("corrected_answer")]
        if failed and not corrected:
            return None, (number, "failed_without_correction")
        if corrected:
            answer = str(corrected[-1]["corrected_answer"])
            if {c for v in failed for c in v.get("categories", [])} & TOOL_CATEGORIES:
                tools = []
        invocations.append(
            {
                "invocation_id": f"vigil-{turn['trace_id']}",
                "user_content": {"role": "user", "parts": [{"text": user}]},
                "final_response": {"role": "model", "parts": [{"text": answer}]},
                "intermediate_data": {"tool_uses": tools, "intermediate_responses": []},
                "creation_timestamp": created,
            }
        )
    if not invocations:
        return None, (0, "unknown_session")
    case = {
        "eval_id": eval_id,
        "conversation": invocations,
        "session_input": {"app_name": str(turns[-1].get("agent") or "unknown"), "user_id": "vigil", "state": {}},
        "creation_timestamp": created,
    }
    return case, None


def _last(entries: Sequence[Mapping[str, Any]], role: str) -> str:
    for entry in reversed(entries):
        if entry.get("kind", "message") == "message" and entry.get("role") == role and str(entry.get("content", "")):
            return str(entry["content"])
    return ""


def _answer(conversation: Sequence[Mapping[str, Any]]) -> str:
    final = next((e for e in reversed(conversation) if e.get("kind") == "final" or e.get("final")), None)
    if final is not None:
        return str(final.get("content") or "")
    return _last(conversation, "assistant")


def _details_tools(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"id": e.get("call_id") or e.get("span_id"), "name": e.get("name"), "args": decode_args(e.get("arguments"))}
        for e in entries
        if e.get("kind") == "tool"
    ]
