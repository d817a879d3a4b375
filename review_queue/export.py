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

Only verdicts that judge the item's run count (``run`` verdicts, or a ``turn`` verdict on a session
item naming its last turn): a verdict on a whole session judges no one run, so a session item judged
only as a session is skipped here (``no_verdict``); ``vigil eval add --from-session`` takes it whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from review_queue.model import ItemState
from review_queue.tables import review_items, review_verdicts, runs, verdict_run
from scorers.eval.actual import decode_args

__all__ = ["ExportResult", "case_from_run", "eval_case", "eval_set", "export_cases"]

TOOL_CATEGORIES = frozenset(("wrong_tool", "wrong_arguments", "loop"))
"""Failure categories that make a failed run's tool calls unfit as the expected trajectory."""


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
        verdicts = _verdicts(conn, [int(row["id"]) for row in items])
    for row in items:
        case, skip = eval_case(row["snapshot"], verdicts.get(int(row["id"]), []), row["completed_at"] or 0.0)
        if case is None:
            result.skipped[skip] = result.skipped.get(skip, 0) + 1
        else:
            result.cases.append(case)
    return result


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
        verdicts = _verdicts(conn, [int(row["id"])]).get(int(row["id"])) or [{"verdict": "pass"}]
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
        tools = [] if blamed else _tool_uses(snapshot)
    else:
        answer = snapshot.get("final_output") or ""
        tools = _tool_uses(snapshot)
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


def _tool_uses(snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": tool.get("call_id") or tool.get("span_id"),
            "name": tool["name"],
            "args": decode_args(tool.get("arguments")),
        }
        for tool in snapshot.get("tools", [])
    ]


def _verdicts(conn: sa.Connection, item_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The verdicts on each item that judge the item's own run: not a session item's session or
    other-turn verdicts (:data:`review_queue.tables.verdict_run`)."""
    found: dict[int, list[dict[str, Any]]] = {}
    for start in range(0, len(item_ids), 900):
        chunk = item_ids[start : start + 900]
        query = (
            sa.select(review_verdicts)
            .join(review_items, review_items.c.id == review_verdicts.c.item_id)
            .where(review_verdicts.c.item_id.in_(chunk), verdict_run == review_items.c.trace_id)
            .order_by(review_verdicts.c.id)
        )
        for row in conn.execute(query).mappings():
            found.setdefault(int(row["item_id"]), []).append(dict(row))
    return found
