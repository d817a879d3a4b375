"""The quality targets as the reviewers' stats page shows them: each target's bound per agent and,
where the store can tell, its value over the last 7 days.

The store knows every run (task completion from ``runs.task_completed`` minus runs a reviewer
failed, safety blocks, steps, step efficiency from the runs' ``step_efficiency`` scores) and every
verdict (pass rate) and every closed session (session completion: closed in the window, not
``abandoned``); user-defined targets are Prometheus-only (the Grafana SLO rows), shown as "–".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa

from review_queue.explorer import score_value
from review_queue.session_queries import signal_clause
from review_queue.sessions import ABANDONED
from review_queue.tables import review_verdicts, runs, sessions, verdict_run
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


def target_rows(conn: sa.Connection, config: SloConfig, now: float) -> list[TargetRow]:
    """The fleet's targets, then each agent seen in the last 7 days with its own bounds and values."""
    values = _values(conn, now - WINDOW_S)
    rows = []
    for name, t in config.targets.items():
        fleet = _fleet(values, name) if t.sli.name == name else None
        rows.append(TargetRow("*", name, bound_text(t), _fmt(t, fleet), _met(t, fleet)))
    for agent in sorted(set(values) | set(config.agents)):
        for name, t in config.agents.get(agent, config.targets).items():
            value = values.get(agent, {}).get(name) if t.sli.name == name else None
            rows.append(TargetRow(agent, name, bound_text(t), _fmt(t, value), _met(t, value)))
    return rows


def _fleet(values: Mapping[str, Mapping[str, tuple[float, float]]], name: str) -> tuple[float, float] | None:
    parts = [v[name] for v in values.values() if name in v]
    den = sum(d for _, d in parts)
    return (sum(n for n, _ in parts), den) if den > 0 else None


def _values(conn: sa.Connection, since: float) -> dict[str, dict[str, tuple[float, float]]]:
    """(numerator, denominator) per agent and target, over runs and verdicts since ``since``."""
    fails = sa.and_(review_verdicts.c.verdict == "fail", verdict_run.is_not(None))  # a session verdict: no run
    failed = sa.select(verdict_run.label("trace_id")).where(fails).distinct().subquery()
    completed = sa.and_(runs.c.task_completed.is_(True), runs.c.trace_id.not_in(sa.select(failed.c.trace_id)))
    efficiency = score_value(conn.dialect.name, "step_efficiency")
    query = (
        sa.select(
            runs.c.agent,
            sa.func.count(),
            sa.func.sum(sa.case((completed, 1), else_=0)),
            sa.func.sum(sa.case((runs.c.task_completed.is_not(None), 1), else_=0)),
            sa.func.sum(sa.case((runs.c.safety_blocked.is_(True), 1), else_=0)),
            sa.func.sum(runs.c.llm_calls),
            sa.func.sum(efficiency),
            sa.func.count(efficiency),
        )
        .where(runs.c.created_at >= since)
        .group_by(runs.c.agent)
    )
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for agent, count, done, known, blocked, steps, efficient, scored in conn.execute(query):
        entry = out.setdefault(agent, {})
        if known:
            entry["task_completion"] = (float(done or 0), float(known))
        entry["safety_block_rate"] = (float(blocked or 0), float(count))
        entry["steps_per_task"] = (float(steps or 0), float(count))
        if scored:  # summed step efficiency / runs scored for it, as the SLI (scorers.slo.SLIS)
            entry["step_efficiency"] = (float(efficient or 0), float(scored))
    verdicts = sa.select(review_verdicts.c.agent, review_verdicts.c.verdict, sa.func.count()).where(
        review_verdicts.c.created_at >= since
    )
    for agent, verdict, count in conn.execute(verdicts.group_by(review_verdicts.c.agent, review_verdicts.c.verdict)):
        passed, total = out.setdefault(agent, {}).get("review_pass_rate", (0.0, 0.0))
        out[agent]["review_pass_rate"] = (passed + (count if verdict == "pass" else 0), total + count)
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
