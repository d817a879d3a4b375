"""The quality targets as the reviewers' stats page shows them: each target's bound per agent and,
where the store can tell, its value over the last 7 days.

The store knows every run (safety blocks, steps, step efficiency from the runs' ``step_efficiency``
scores) and every closed session (session completion: closed in the window, not ``abandoned``);
the review pass rate and task completion — figures a human verdict decides or corrects — are the
estimates of :mod:`review_queue.quality` with their intervals (never the share of all verdicts,
which mixes the rule-flagged runs in); user-defined targets are Prometheus-only (the Grafana SLO
rows), shown as "–".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from review_queue.explorer import score_value
from review_queue.quality import HUMAN_TARGETS
from review_queue.session_queries import signal_clause
from review_queue.sessions import ABANDONED
from review_queue.tables import runs, sessions
from scorers.slo import Direction, SloConfig, Target

WINDOW_S: Final = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class TargetRow:
    """One line of the targets table.

    Attributes:
        agent: the agent, or ``"*"`` for the fleet's bound.
        target: the target's name.
        bound: the bound as text (``>= 85 %``, ``0.05 % - 0.5 %``, ``< +20 % week over week``).
        value: the 7-day value as text, ``–`` when unknown here.
        met: whether the value meets the bound (``None`` when unknown or a trend).
    """

    agent: str
    target: str
    bound: str
    value: str
    met: bool | None


def bound_text(t: Target) -> str:
    """The target's bound for humans."""
    ratio = t.sli.unit == "ratio"
    value = f"{t.objective * 100:g} %" if ratio else f"{t.objective:g}"
    if t.direction is Direction.AT_LEAST:
        return f">= {value}"
    if t.direction is Direction.AT_MOST:
        return f"<= {value}"
    if t.direction is Direction.BAND:
        return f"{t.floor * 100:g} % - {value}"
    return f"< +{t.objective * 100:g} % week over week"


def target_rows(
    conn: sa.Connection, config: SloConfig, now: float, estimates: Mapping[str, Any] | None = None
) -> list[TargetRow]:
    """The fleet's targets, then each agent seen in the last 7 days with its own bounds and values.

    The targets a human verdict decides or corrects (:data:`review_queue.quality.HUMAN_TARGETS`) take
    their value and "met" from ``estimates`` (a 7-day :func:`review_queue.quality.quality_report`):
    the estimate with its interval and n, met only when the whole interval is; without it, "–".
    """
    values = _values(conn, now - WINDOW_S)
    human = _estimated(estimates)
    rows = []
    for name, t in config.targets.items():
        if name in HUMAN_TARGETS:
            rows.append(_human_row("*", name, t, human))
            continue
        fleet = _fleet(values, name) if t.sli.name == name else None
        rows.append(TargetRow("*", name, bound_text(t), _fmt(t, fleet), _met(t, fleet)))
    for agent in sorted(set(values) | set(config.agents)):
        for name, t in config.agents.get(agent, config.targets).items():
            if name in HUMAN_TARGETS:
                rows.append(_human_row(agent, name, t, human))
                continue
            value = values.get(agent, {}).get(name) if t.sli.name == name else None
            rows.append(TargetRow(agent, name, bound_text(t), _fmt(t, value), _met(t, value)))
    return rows


def _estimated(estimates: Mapping[str, Any] | None) -> dict[tuple[str, str], Mapping[str, Any]]:
    if estimates is None:
        return {}
    return {(a["agent"], r["target"]): r for a in estimates["agents"] for r in a["estimates"]}


def _human_row(agent: str, name: str, t: Target, human: Mapping[tuple[str, str], Mapping[str, Any]]) -> TargetRow:
    row = human.get((agent, name))
    e = None if row is None else row["estimate"]
    if row is None or e is None or e["value"] is None:
        return TargetRow(agent, name, bound_text(t), "–", None)
    text = f"{e['value'] * 100:.1f} % [{e['low'] * 100:.1f}, {e['high'] * 100:.1f}] n={e['n']} ({e['method']})"
    met = {"met": True, "not met": False}.get(row["status"])
    return TargetRow(agent, name, bound_text(t), text, met)


def _fleet(values: Mapping[str, Mapping[str, tuple[float, float]]], name: str) -> tuple[float, float] | None:
    parts = [v[name] for v in values.values() if name in v]
    den = sum(d for _, d in parts)
    return (sum(n for n, _ in parts), den) if den > 0 else None


def _values(conn: sa.Connection, since: float) -> dict[str, dict[str, tuple[float, float]]]:
    """(numerator, denominator) per agent and store-known target, over runs and sessions since ``since``."""
    efficiency = score_value(conn.dialect.name, "step_efficiency")
    query = (
        sa.select(
            runs.c.agent,
            sa.func.count(),
            sa.func.sum(sa.case((runs.c.safety_blocked.is_(True), 1), else_=0)),
            sa.func.sum(runs.c.llm_calls),
            sa.func.sum(efficiency),
            sa.func.count(efficiency),
        )
        .where(runs.c.created_at >= since)
        .group_by(runs.c.agent)
    )
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for agent, count, blocked, steps, efficient, scored in conn.execute(query):
        entry = out.setdefault(agent, {})
        entry["safety_block_rate"] = (float(blocked or 0), float(count))
        entry["steps_per_task"] = (float(steps or 0), float(count))
        if scored:  # summed step efficiency / runs scored for it, as the SLI (scorers.slo.SLIS)
            entry["step_efficiency"] = (float(efficient or 0), float(scored))
    abandoned = sa.case((signal_clause(conn.dialect.name, ABANDONED), 1), else_=0)
    closed = (
        sa.select(sessions.c.agent, sa.func.count(), sa.func.sum(abandoned))
        .where(sessions.c.status == "closed", sessions.c.closed_at >= since)
        .group_by(sessions.c.agent)
    )
    for agent, count, lost in conn.execute(closed):  # completed / closed, as vigil_sessions_completed_total
        out.setdefault(agent, {})["session_completion"] = (float(count - (lost or 0)), float(count))
    return out


def _fmt(t: Target, value: tuple[float, float] | None) -> str:
    if value is None or value[1] <= 0:
        return "–"
    ratio = value[0] / value[1]
    return f"{ratio * 100:.1f} %" if t.sli.unit == "ratio" else f"{ratio:.2f}"


def _met(t: Target, value: tuple[float, float] | None) -> bool | None:
    if value is None or value[1] <= 0 or t.direction is Direction.TREND:
        return None
    ratio = value[0] / value[1]
    if t.direction is Direction.AT_LEAST:
        return ratio >= t.objective
    if t.direction is Direction.AT_MOST:
        return ratio <= t.objective
    return t.floor <= ratio <= t.objective
