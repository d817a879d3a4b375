"""Read side of the workbench: the filtered item list and counts of the queue view, and review stats.

Plain functions over an open connection, returning dicts; the web UI and ``/api/v1/stats`` use them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from review_queue.model import ItemState
from review_queue.tables import review_items, review_verdicts, run_details, runs

__all__ = [
    "ItemFilter",
    "bucket_window",
    "depth_over_time",
    "filter_choices",
    "first_item_at",
    "flags_by_reason",
    "item_counts",
    "list_items",
    "since_first",
    "verdict_stats",
    "verdicts_over_time",
]

MAX_ITEMS = 500


@dataclass(frozen=True, slots=True)
class ItemFilter:
    """Queue view filters; ``None`` means any.

    Attributes:
        state: item state.
        priority: item priority.
        reason: one flag reason the item must carry.
        agent: the run's agent.
        assignee: items assigned to this reviewer.
    """

    state: str | None = None
    priority: str | None = None
    reason: str | None = None
    agent: str | None = None
    assignee: str | None = None


def _reason_clause(dialect: str, reason: str) -> sa.ColumnElement[bool]:
    if dialect == "postgresql":
        return sa.type_coerce(review_items.c.reasons, postgresql.JSONB).contains([reason])
    each = sa.func.json_each(review_items.c.reasons).table_valued("value")
    return sa.exists().select_from(each).where(each.c.value == reason)


def where(conn: sa.Connection, f: ItemFilter, *, with_state: bool = True) -> list[sa.ColumnElement[bool]]:
    """The SQL clauses of ``f`` over ``review_items`` joined with ``runs`` (the queue page and the API)."""
    clauses: list[sa.ColumnElement[bool]] = []
    if with_state and f.state:
        clauses.append(review_items.c.state == f.state)
    if f.priority:
        clauses.append(review_items.c.priority == f.priority)
    if f.reason:
        clauses.append(_reason_clause(conn.dialect.name, f.reason))
    if f.agent:
        clauses.append(runs.c.agent == f.agent)
    if f.assignee:
        clauses.append(review_items.c.assigned_to == f.assignee)
    return clauses


def list_items(conn: sa.Connection, f: ItemFilter, limit: int = 200, offset: int = 0) -> list[dict[str, Any]]:
    """Items matching ``f``, highest priority first then oldest, at most ``limit`` (≤ 500) from ``offset``;
    each with its run's agent, times, user message (``run_details.user_message``, None without details)
    and latest verdict."""
    query = (
        sa.select(
            review_items.c.id,
            review_items.c.trace_id,
            review_items.c.state,
            review_items.c.priority,
            review_items.c.reasons,
            review_items.c.assigned_to,
            review_items.c.claimed_by,
            review_items.c.reviews_done,
            review_items.c.reviews_required,
            review_items.c.created_at,
            review_items.c.updated_at,
            runs.c.agent,
            runs.c.start_ns,
            runs.c.end_ns,
            run_details.c.user_message,
            _last_verdict("verdict"),
            _last_verdict("reviewer"),
        )
        .join(runs, runs.c.trace_id == review_items.c.trace_id)
        .outerjoin(run_details, run_details.c.trace_id == review_items.c.trace_id)
        .where(*where(conn, f))
        .order_by(review_items.c.priority_rank.desc(), review_items.c.created_at, review_items.c.id)
        .limit(min(limit, MAX_ITEMS))
        .offset(max(0, offset))
    )
    return [dict(row) for row in conn.execute(query).mappings()]


def _last_verdict(column: str) -> sa.Label[Any]:
    """The item's latest verdict's ``column`` (verdict, reviewer), ``None`` before any."""
    return (
        sa.select(review_verdicts.c[column])
        .where(review_verdicts.c.item_id == review_items.c.id)
        .order_by(review_verdicts.c.id.desc())
        .limit(1)
        .scalar_subquery()
        .label(f"last_{column}")
    )


def filter_choices(conn: sa.Connection) -> dict[str, list[str]]:
    """The values the queue's filters choose from: the agents and flag reasons of the latest
    :data:`CHOICES_FROM` items (read from the items, so a new rule's reason appears with its first item;
    bounded, so a queue page costs the same on a queue of millions). Older values stay reachable by URL."""
    latest = (
        sa.select(runs.c.agent, review_items.c.reasons)
        .join(runs, runs.c.trace_id == review_items.c.trace_id)
        .order_by(review_items.c.id.desc())
        .limit(CHOICES_FROM)
    )
    agents: set[str] = set()
    reasons: set[str] = set()
    for agent, listed in conn.execute(latest):
        if agent:
            agents.add(agent)
        reasons.update(r for r in listed or () if isinstance(r, str))
    return {"agents": sorted(agents)[:MAX_CHOICES], "reasons": sorted(reasons)[:MAX_CHOICES]}


CHOICES_FROM = 5000
"""Latest items whose agents and reasons the queue's filters list."""
MAX_CHOICES = 200
"""Most values a filter lists (agents, reasons)."""


def first_item_at(conn: sa.Connection) -> float | None:
    """When the oldest review item still stored was created (``None``: the queue never held one)."""
    found = conn.execute(sa.select(sa.func.min(review_items.c.created_at))).scalar()
    return None if found is None else float(found)


def since_first(history: dict[str, Any], first: float | None, bucket_s: float) -> dict[str, Any]:
    """``history`` (:func:`depth_over_time`) without the buckets that ended before the first item: a
    queue that did not exist yet is not a queue of depth 0 (at least two buckets stay, for a line)."""
    buckets = history["buckets"]
    start = next((i for i, b in enumerate(buckets) if first is not None and b + bucket_s > first), len(buckets))
    start = min(start, max(0, len(buckets) - 2))
    return {
        "buckets": buckets[start:],
        "total": history["total"][start:],
        "agents": {a: v[start:] for a, v in history["agents"].items()},
    }


def item_counts(conn: sa.Connection, f: ItemFilter) -> dict[str, int]:
    """Item count per state under ``f``'s other filters (every state present, 0 when none)."""
    query = (
        sa.select(review_items.c.state, sa.func.count())
        .join(runs, runs.c.trace_id == review_items.c.trace_id)
        .where(*where(conn, f, with_state=False))
        .group_by(review_items.c.state)
    )
    counts = {state.value: 0 for state in ItemState}
    counts.update({state: int(n) for state, n in conn.execute(query)})
    return counts


def verdict_stats(conn: sa.Connection) -> dict[str, Any]:
    """Verdict totals, and pass rate and failure categories per agent."""
    rows = conn.execute(
        sa.select(review_verdicts.c.agent, review_verdicts.c.verdict, review_verdicts.c.categories)
    ).all()
    totals = {"pass": 0, "fail": 0}
    agents: dict[str, dict[str, Any]] = {}
    for agent, verdict, categories in rows:
        totals[verdict] = totals.get(verdict, 0) + 1
        entry = agents.setdefault(agent, {"agent": agent, "pass": 0, "fail": 0, "categories": {}})
        entry[verdict] = entry.get(verdict, 0) + 1
        for category in categories or []:
            entry["categories"][category] = entry["categories"].get(category, 0) + 1
    per_agent = sorted(agents.values(), key=lambda e: -(e["pass"] + e["fail"]))
    for entry in per_agent:
        entry["pass_rate"] = entry["pass"] / (entry["pass"] + entry["fail"])
    return {"totals": totals, "agents": per_agent}


def flags_by_reason(conn: sa.Connection, since: float, until: float, bucket_s: float) -> dict[str, Any]:
    """Items created in [since, until) counted per reason and time bucket of ``bucket_s``.

    Returns:
        ``{"buckets": [start, ...], "reasons": {reason: [count per bucket]}}``, oldest bucket first.
    """
    rows = conn.execute(
        sa.select(review_items.c.created_at, review_items.c.reasons).where(
            review_items.c.created_at >= since, review_items.c.created_at < until
        )
    ).all()
    count = max(1, math.ceil((until - since) / bucket_s))
    buckets = [since + i * bucket_s for i in range(count)]
    reasons: dict[str, list[int]] = {}
    for created_at, item_reasons in rows:
        index = min(count - 1, int((created_at - since) // bucket_s))
        for reason in item_reasons or []:
            reasons.setdefault(reason, [0] * count)[index] += 1
    return {"buckets": buckets, "reasons": dict(sorted(reasons.items()))}


def bucket_window(now: float, bucket_s: float, count: int) -> tuple[float, float]:
    """``(since, until)`` of ``count`` whole buckets ending with the one holding ``now``.

    Buckets start on multiples of ``bucket_s`` (whole UTC hours or days), so a bucket's label is
    the hour (day) its events happened in: at 22:55 the last bucket is [22:00, 23:00), labelled
    22. (Buckets counted back from ``now`` itself started at :55 and were labelled with the
    previous hour.)
    """
    until = (math.floor(now / bucket_s) + 1) * bucket_s
    return until - count * bucket_s, until


def depth_over_time(conn: sa.Connection, since: float, until: float, bucket_s: float) -> dict[str, Any]:
    """Open review items (created, not yet done) at the end of each bucket, in total and per agent.

    An item counts from its ``created_at`` until its ``completed_at`` (a requeued item counts
    from its creation until its last completion).

    Returns:
        ``{"buckets": [start, ...], "total": [n, ...], "agents": {agent: [n, ...]}}``.
    """
    rows = conn.execute(
        sa.select(review_items.c.created_at, review_items.c.completed_at, review_items.c.state, runs.c.agent)
        .join(runs, runs.c.trace_id == review_items.c.trace_id)
        .where(
            review_items.c.created_at < until,
            sa.or_(review_items.c.completed_at.is_(None), review_items.c.completed_at >= since),
        )
    ).all()
    count = max(1, math.ceil((until - since) / bucket_s))
    ends = [since + (i + 1) * bucket_s for i in range(count)]
    total = [0] * count
    agents: dict[str, list[int]] = {}
    for created, completed, state, agent in rows:
        done_at = completed if state == ItemState.DONE.value and completed is not None else None
        per_agent = agents.setdefault(agent, [0] * count)
        for i, end in enumerate(ends):
            if created < end and (done_at is None or done_at >= end):
                total[i] += 1
                per_agent[i] += 1
    return {"buckets": [e - bucket_s for e in ends], "total": total, "agents": dict(sorted(agents.items()))}


def verdicts_over_time(conn: sa.Connection, since: float, until: float, bucket_s: float) -> dict[str, Any]:
    """Pass rate per bucket (total and per agent) and failure categories counted per bucket.

    Returns:
        ``{"buckets": [start, ...], "pass_rate": [rate or None, ...], "agents": {agent: [rate or
        None, ...]}, "categories": {category: [count, ...]}}``; ``None`` where no verdict fell.
    """
    rows = conn.execute(
        sa.select(
            review_verdicts.c.created_at,
            review_verdicts.c.agent,
            review_verdicts.c.verdict,
            review_verdicts.c.categories,
        ).where(review_verdicts.c.created_at >= since, review_verdicts.c.created_at < until)
    ).all()
    count = max(1, math.ceil((until - since) / bucket_s))
    tally: dict[str, list[list[int]]] = {}
    categories: dict[str, list[int]] = {}
    for created, agent, verdict, cats in rows:
        index = min(count - 1, int((created - since) // bucket_s))
        for key in ("", agent):
            cell = tally.setdefault(key, [[0, 0] for _ in range(count)])[index]
            cell[0 if verdict == "pass" else 1] += 1
        for category in cats or []:
            categories.setdefault(category, [0] * count)[index] += 1

    def rates(cells: list[list[int]]) -> list[float | None]:
        return [p / (p + f) if p + f else None for p, f in cells]

    overall = tally.pop("", [[0, 0] for _ in range(count)])
    return {
        "buckets": [since + i * bucket_s for i in range(count)],
        "pass_rate": rates(overall),
        "agents": {agent: rates(cells) for agent, cells in sorted(tally.items())},
        "categories": dict(sorted(categories.items())),
    }
