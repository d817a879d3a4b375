"""How a :class:`scorers.model.ScoredRun` becomes stored rows: the run row and the item snapshot.

Pure functions, no I/O. The snapshot is the JSON document a reviewer sees: the
normalised run with its steps, tool calls (arguments, results, errors), messages,
final output and scores, frozen at the time of the (latest) flag decision.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

from scorers.model import Flag, Priority, Run, SampleDesign, ScoredRun, Step, StepKind, ToolCall
from scorers.slo import task_completed

__all__ = [
    "SNAPSHOT_VERSION",
    "add_to_flag",
    "evidence_list",
    "item_row",
    "keep_added",
    "run_row",
    "run_snapshot",
]

SNAPSHOT_VERSION = 1
"""Schema version of the snapshot document, stored in its ``snapshot_version`` key."""


def run_snapshot(scored: ScoredRun) -> dict[str, Any]:
    """Return the JSON-ready snapshot of a scored run.

    Args:
        scored: the run with its scores and flag decision.

    Returns:
        A dict of plain JSON types: run summary fields, ``steps``, ``tools``,
        ``messages``, ``final_output``, ``attributes``, ``scores`` and ``scorer_errors``.
    """
    run = scored.run
    doc = _summary(run)
    doc.update(
        snapshot_version=SNAPSHOT_VERSION,
        optimal_steps=run.optimal_steps,
        span_count=run.span_count,
        final_output=run.final_output,
        steps=[_step(step) for step in run.steps],
        tools=[_tool(tool) for tool in run.tools],
        messages=[{"role": m.role, "content": m.content} for m in run.messages],
        attributes={key: _finite(value) for key, value in run.attributes.items()},
        scores=_scores(scored),
        scorer_errors=list(scored.scorer_errors),
        evidence=evidence_list(scored),
    )
    return doc


def partial_snapshot(row: Mapping[Any, Any], fields: Iterable[str], **extra: Any) -> dict[str, Any]:
    """The snapshot of a run known only by its stored summary ``row`` (``fields`` copied, plus ``extra``):
    ``partial``, with no steps, tools, messages or attributes (the page reads its details document)."""
    doc = {name: row[name] for name in fields}
    doc.update(
        snapshot_version=SNAPSHOT_VERSION,
        partial=True,
        final_output=None,
        steps=[],
        tools=[],
        messages=[],
        attributes={},
        scores=dict(row["scores"] or {}),
        scorer_errors=list(row["scorer_errors"] or []),
        **extra,
    )
    return doc


def evidence_list(scored: ScoredRun) -> list[dict[str, str]]:
    """The run's signal evidence then its flag reasons' evidence, as JSON dicts."""
    return [e.as_dict() for e in (*scored.run.evidence, *scored.evidence)]


def run_row(scored: ScoredRun, now: float) -> dict[str, Any]:
    """Return the ``runs`` row of a scored run (``created_at``/``updated_at`` = ``now``).

    Args:
        scored: the run with its scores and flag decision.
        now: the write time, Unix epoch seconds.

    Returns:
        A dict keyed by :data:`review_queue.tables.runs` column names, ``version`` = 1. Text
        longer than its column is cut and NUL characters are replaced by U+FFFD (PostgreSQL
        rejects both, and one bad agent name must not fail a whole batch).
    """
    row = _summary(scored.run)
    row["session_id"] = scored.run.session_id
    row["user_id"] = scored.run.user_id
    for name, width in _WIDTHS.items():
        if row[name] is not None:
            row[name] = row[name][:width].replace("\x00", "\ufffd")
    row.update(_flag_columns(scored.flag))
    row.update(_design_columns(scored.design))
    row.update(
        scores=_scores(scored),
        scorer_errors=list(scored.scorer_errors),
        created_at=now,
        updated_at=now,
        version=1,
        span_count=scored.run.span_count,
        evidence=evidence_list(scored) or None,
        task_completed=task_completed(scored.run),
    )
    return row


def item_row(scored: ScoredRun, flag: Flag, now: float) -> dict[str, Any]:
    """Return the ``review_items`` row of a flagged run (state ``pending``).

    Args:
        scored: the flagged run.
        flag: its flag decision (``scored.flag``, passed narrowed).
        now: the write time, Unix epoch seconds.

    Returns:
        A dict keyed by :data:`review_queue.tables.review_items` column names, without ``id``.
    """
    return {
        "trace_id": scored.run.trace_id,
        "state": "pending",
        "priority": flag.priority.value,
        "priority_rank": flag.priority.rank,
        "reasons": list(flag.reasons),
        "sample_rate": flag.sample_rate,
        "snapshot": run_snapshot(scored),
        "created_at": now,
        "updated_at": now,
        "version": 1,
        "span_count": scored.run.span_count,
    }


def add_to_flag(
    added: Mapping[str, Any] | None, reasons: Iterable[str], priority: Priority, *, session_id: str | None = None
) -> dict[str, Any]:
    """The run's ``flag_added`` after ``reasons`` were added to its flag outside the scorer.

    Reasons keep their order (new ones appended), the priority is the higher, and a session flag
    records the session's id (the item is then the session's: see :func:`keep_added`).
    """
    added = added or {}
    merged, top = _union(added.get("reasons") or (), reasons, priority, added.get("priority"))
    doc: dict[str, Any] = {"reasons": merged, "priority": top.value}
    session = session_id or added.get("session_id")
    if session:
        doc["session_id"] = session
    return doc


def keep_added(reasons: Iterable[str], priority: Priority, added: Mapping[str, Any]) -> tuple[list[str], Priority]:
    """A re-score's flag reasons and priority with what ``flag_added`` holds kept (see :func:`add_to_flag`)."""
    return _union(reasons, added.get("reasons") or (), priority, added.get("priority"))


def _union(
    first: Iterable[str], then: Iterable[str], priority: Priority, other: str | None
) -> tuple[list[str], Priority]:
    """``first``'s reasons, then ``then``'s not among them; the higher of ``priority`` and ``other``."""
    kept = list(first)
    kept += [r for r in then if r not in kept]
    if other is not None and Priority(other).rank > priority.rank:
        priority = Priority(other)
    return kept, priority


_WIDTHS = {"agent": 256, "service": 256, "dialect": 32, "error_type": 256, "session_id": 256, "user_id": 256}
"""Widths of the bounded text columns of ``runs`` (see :mod:`review_queue.tables`)."""


def _scores(scored: ScoredRun) -> dict[str, float]:
    # NaN/inf are not JSON (PostgreSQL rejects them); a scorer that produced one has no opinion.
    return {name: value for name, value in scored.scores.items() if math.isfinite(value)}


def _finite(value: str | int | float | bool) -> str | int | float | bool:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _int64(value: int) -> int:
    """``value`` clamped to a signed 64-bit column (OTLP timestamps are unsigned; sums can overflow)."""
    return _INT64_MIN if value < _INT64_MIN else _INT64_MAX if value > _INT64_MAX else value


def _summary(run: Run) -> dict[str, Any]:
    return {
        "trace_id": run.trace_id,
        "agent": run.agent,
        "service": run.service,
        "dialect": run.dialect,
        "status": run.status.value,
        "complete": run.complete,
        "start_ns": _int64(run.start_ns),
        "end_ns": _int64(run.end_ns),
        "duration_s": run.duration_s,
        "llm_calls": run.llm_calls,
        "tool_calls": run.tool_calls,
        "tool_errors": run.tool_errors,
        "input_tokens": _int64(run.input_tokens),
        "output_tokens": _int64(run.output_tokens),
        "hit_max_iterations": run.hit_max_iterations,
        "safety_blocked": run.safety_blocked,
        "errored": run.errored,
        "error_type": run.error_type,
    }


DESIGN_COLUMNS: Final = ("sample_p", "sample_drawn", "rule_flagged", "sample_shed")
"""The ``runs`` columns of :class:`scorers.model.SampleDesign`, set once by a run's first decision."""


def _design_columns(design: SampleDesign | None) -> dict[str, Any]:
    if design is None:
        return dict.fromkeys(DESIGN_COLUMNS)
    return {
        "sample_p": design.rate,
        "sample_drawn": design.drawn,
        "rule_flagged": design.rule_flagged,
        "sample_shed": design.shed,
    }


def _flag_columns(flag: Flag | None) -> dict[str, Any]:
    if flag is None:
        return {"flagged": False, "flag_priority": None, "flag_reasons": None, "sample_rate": None}
    return {
        "flagged": True,
        "flag_priority": flag.priority.value,
        "flag_reasons": list(flag.reasons),
        "sample_rate": flag.sample_rate,
    }


_KIND_TEXT = {kind: kind.value for kind in StepKind}
"""``StepKind.value`` through an enum property costs more than a dict look-up (one per step)."""


def _step(step: Step) -> dict[str, Any]:
    # Spelled out rather than dataclasses.asdict: asdict deep-copies and is ~5x slower.
    start, end = step.start_ns, step.end_ns
    return {
        "span_id": step.span_id,
        "parent_id": step.parent_id,
        "name": step.name,
        "kind": _KIND_TEXT[step.kind],
        "start_ns": start,
        "end_ns": end,
        "duration_s": max(0, end - start) / 1e9,  # Step.duration_s, inlined
        "error": step.error,
        "error_type": step.error_type,
        "status_message": step.status_message,
        "model": step.model,
        "input_tokens": step.input_tokens,
        "output_tokens": step.output_tokens,
        "finish_reasons": list(step.finish_reasons),
    }


def _tool(tool: ToolCall) -> dict[str, Any]:
    return {
        "span_id": tool.span_id,
        "name": tool.name,
        "call_id": tool.call_id,
        "arguments": tool.arguments,
        "result": tool.result,
        "error": tool.error,
    }
