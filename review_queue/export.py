"""Export reviewed runs as an evaluation set: production traffic → offline regression cases.

Shape: the ADK ``EvalSet`` JSON (``eval_set_id``, ``name``, ``description``, ``eval_cases``,
``creation_timestamp``). Each case is one reviewed run, with one invocation: the user's
first message (``user_content``), the expected tool trajectory (``intermediate_data.tool_uses``)
and the expected final response. Which runs become cases:

* a **done** item whose verdicts all **pass**: the run's own answer and tool calls are expected;
* a done item with a **fail** verdict that carries a **corrected answer**: the corrected answer is
  expected; the tool trajectory is kept only when no verdict blamed the tools
  (``wrong_tool``, ``wrong_arguments``, ``loop``), else left empty;
* anything else (failed without a correction, no captured user message) is skipped and counted.

**Turns of a conversation.** A verdict on one turn of a session (a ``turn`` verdict on a session
item, any turn) becomes a *multi-turn* case, as ``vigil eval add --from-session`` builds them
(:func:`review_queue.export_session.case_up_to_turn`): the session's turns up to and including the
judged one, one invocation each — the earlier turns as the history, with their stored answers (or
their own verdicts' corrected answers) — and the judged turn last, expected as its verdicts say (the
rules above). So does a ``run`` verdict on a run that is not the first turn of its session: its
input was the conversation so far. The case's id is the judged turn's trace id, one case per judged
run whichever items its verdicts are on. A turn with no stored content, no user message, or failed
without a correction makes the case unfit (skipped under that reason; ``too_many_turns`` past
:data:`review_queue.session_queries.MAX_TURNS`).

A verdict on a whole session judges no one run, so a session item judged only as a session is
skipped here (``no_verdict``); ``vigil eval add --from-session`` takes it whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from review_queue.model import ItemState, VerdictTarget
from review_queue.tables import review_items, review_verdicts, runs, verdict_run
from review_queue.trajectory import TOOL_CATEGORIES, tool_uses

__all__ = ["ExportResult", "case_from_run", "eval_case", "eval_set", "export_cases"]


@dataclass
class ExportResult:
    """Cases exported and why others were skipped.

    Attributes:
        cases: EvalCase dicts, oldest review first.
        skipped: reason → count (``failed_without_correction``, ``no_user_message``).
    """

    cases: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)


def export_cases(engine: Engine, *, agent: str | None = None, since: float | None = None) -> ExportResult:
    """Build the eval cases of every done item (optionally of one agent, completed since a time)."""
    from review_queue.export_session import case_up_to_turn  # it reads the store this module exports

    query = (
        sa.select(review_items.c.id, review_items.c.trace_id, review_items.c.snapshot, review_items.c.completed_at)
        .join(runs, runs.c.trace_id == review_items.c.trace_id)
        .where(review_items.c.state == ItemState.DONE.value)
        .order_by(review_items.c.completed_at, review_items.c.id)
    )
    if agent is not None:
        query = query.where(runs.c.agent == agent)
    if since is not None:
        query = query.where(review_items.c.completed_at >= since)
    result = ExportResult()
    with engine.connect() as conn:
        items = conn.execute(query).mappings().all()
        judged = _judged(items, _verdicts(conn, [int(row["id"]) for row in items]))
        turns = _session_turns(conn, list(judged))
        for trace_id, (item, verdicts, on_turn) in judged.items():
            created = item["completed_at"] or 0.0
            session = turns.get(trace_id)
            if session is not None and (on_turn or session[1] > 1):
                case, skip = case_up_to_turn(conn, session[0], trace_id, created)
            elif trace_id == item["trace_id"]:
                case, skip = eval_case(item["snapshot"], verdicts, created)
            else:  # a turn verdict on a run that has no session any more
                case, skip = None, "unknown_session"
            if case is None:
                result.skipped[skip] = result.skipped.get(skip, 0) + 1
            else:
                result.cases.append(case)
    judging = {int(verdict["item_id"]) for _, found, _ in judged.values() for verdict in found}
    unjudged = sum(1 for row in items if int(row["id"]) not in judging)
    if unjudged:
        result.skipped["no_verdict"] = result.skipped.get("no_verdict", 0) + unjudged
    return result


def _judged(
    items: Sequence[sa.RowMapping], verdicts: Mapping[int, list[dict[str, Any]]]
) -> dict[str, tuple[sa.RowMapping, list[dict[str, Any]], bool]]:
    """The runs the items' verdicts apply to, in the order of the items (oldest review first):
    trace id → (the first item judging it, its verdicts, whether one is a ``turn`` verdict)."""
    judged: dict[str, tuple[sa.RowMapping, list[dict[str, Any]], bool]] = {}
    for item in items:
        for verdict in verdicts.get(int(item["id"]), []):
            trace_id = str(verdict["applies_to"])
            first, found, on_turn = judged.get(trace_id, (item, [], False))
            found.append(verdict)
            judged[trace_id] = (first, found, on_turn or verdict["target"] == VerdictTarget.TURN.value)
    return judged


def _session_turns(conn: sa.Connection, trace_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
    """Of the runs ``trace_ids`` that have a session id: trace id → (session id, 1-based position)."""
    found: dict[str, tuple[str, int]] = {}
    for start in range(0, len(trace_ids), 900):
        chunk = trace_ids[start : start + 900]
        mine = (
            sa.select(runs.c.trace_id, runs.c.session_id, runs.c.start_ns)
            .where(runs.c.trace_id.in_(chunk), runs.c.session_id.is_not(None))
            .subquery("mine")
        )
        earlier = sa.and_(
            runs.c.session_id == mine.c.session_id,
            sa.or_(
                runs.c.start_ns < mine.c.start_ns,
                sa.and_(runs.c.start_ns == mine.c.start_ns, runs.c.trace_id < mine.c.trace_id),
            ),
        )
        before = sa.select(sa.func.count()).where(earlier).scalar_subquery()
        for trace_id, session_id, n in conn.execute(sa.select(mine.c.trace_id, mine.c.session_id, before)):
            found[str(trace_id)] = (str(session_id), int(n) + 1)
    return found


def case_from_run(engine: Engine, trace_id: str, created: float) -> tuple[dict[str, Any] | None, str]:
    """One stored run as an EvalCase (``vigil eval add --from-run``), or ``(None, why_not)``.

    The run's review snapshot is used (content is stored redacted, so the case is too); a reviewed
    run follows :func:`eval_case` (a corrected answer replaces a failed one), an unreviewed one is
    taken as it ran. Runs without a snapshot (unflagged: only the summary is kept) are refused.
    """
    query = sa.select(review_items.c.id, review_items.c.snapshot).where(review_items.c.trace_id == trace_id)
    with engine.connect() as conn:
        row = conn.execute(query).mappings().first()
        if row is None:
            known = conn.execute(sa.select(runs.c.trace_id).where(runs.c.trace_id == trace_id)).first()
            return None, "no_snapshot" if known is not None else "unknown_run"
        mine = [v for v in _verdicts(conn, [int(row["id"])]).get(int(row["id"]), []) if v["applies_to"] == trace_id]
        verdicts = mine or [{"verdict": "pass"}]
    return eval_case(row["snapshot"] or {}, verdicts, created)


def eval_case(
    snapshot: Mapping[str, Any], verdicts: Sequence[Mapping[str, Any]], created: float
) -> tuple[dict[str, Any] | None, str]:
    """One EvalCase from a run snapshot and its verdicts, or ``(None, why_skipped)``. Pure."""
    if not verdicts:
        return None, "no_verdict"
    failed = [v for v in verdicts if v["verdict"] == "fail"]
    corrected = [v for v in failed if v.get("corrected_answer")]
    if failed and not corrected:
        return None, "failed_without_correction"
    user = next((m["content"] for m in snapshot.get("messages", []) if m.get("role") == "user"), None)
    if not user:
        return None, "no_user_message"
    if corrected:
        answer = str(corrected[-1]["corrected_answer"])
        blamed = {c for v in failed for c in v.get("categories", [])} & TOOL_CATEGORIES
        tools = [] if blamed else tool_uses(snapshot)
    else:
        answer = snapshot.get("final_output") or ""
        tools = tool_uses(snapshot)
    trace_id = str(snapshot.get("trace_id", ""))
    invocation = {
        "invocation_id": f"vigil-{trace_id}",
        "user_content": {"role": "user", "parts": [{"text": user}]},
        "final_response": {"role": "model", "parts": [{"text": answer}]},
        "intermediate_data": {"tool_uses": tools, "intermediate_responses": []},
        "creation_timestamp": created,
    }
    case = {
        "eval_id": trace_id,
        "conversation": [invocation],
        "session_input": {"app_name": str(snapshot.get("agent", "unknown")), "user_id": "vigil", "state": {}},
        "creation_timestamp": created,
    }
    return case, ""


def eval_set(cases: Sequence[Mapping[str, Any]], eval_set_id: str, created: float) -> dict[str, Any]:
    """Wrap cases in an EvalSet document."""
    return {
        "eval_set_id": eval_set_id,
        "name": eval_set_id,
        "description": "Runs reviewed in Vigil: passed runs and corrected answers of failed ones.",
        "eval_cases": list(cases),
        "creation_timestamp": created,
    }


def jsonl(cases: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """One JSON line per case."""
    for case in cases:
        yield json.dumps(case, ensure_ascii=False, separators=(",", ":")) + "\n"


def _verdicts(conn: sa.Connection, item_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The verdicts on each item that apply to a run (``applies_to``, :data:`review_queue.tables.verdict_run`):
    the item's own run, or a turn of a session item's session — not verdicts on a whole session."""
    found: dict[int, list[dict[str, Any]]] = {}
    for start in range(0, len(item_ids), 900):
        chunk = item_ids[start : start + 900]
        query = (
            sa.select(review_verdicts, verdict_run.label("applies_to"))
            .where(review_verdicts.c.item_id.in_(chunk), verdict_run.is_not(None))
            .order_by(review_verdicts.c.id)
        )
        for row in conn.execute(query).mappings():
            found.setdefault(int(row["item_id"]), []).append(dict(row))
    return found
