"""Read side of sessions: the sessions listing, one session with its turns, a run's neighbour turns.

A session is the conversation a run is one turn of (``runs.session_id``, read from the trace);
its row in ``sessions`` holds the aggregates and signals the scorer keeps up to date as turns
arrive. A run without a session id is a session of one and has no row. The turns of a session
are its runs in start order (``start_ns``, ties broken by trace id); turn numbers count from 1.

Plain functions over an open connection, returning dicts in the shape the REST API serves
(``/api/v1/sessions``), so the API, the UI and the tests read the same thing. Listing cursors
are opaque URL-safe base64 of a JSON keyset and stay valid under inserts. Every value reaches
SQL as a bound parameter; names (sort key, signal) are checked against a list or a pattern first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from review_queue.explorer import decode_cursor, encode_cursor
from review_queue.judges import verdict_documents
from review_queue.queries import run_document
from review_queue.tables import review_items, runs, session_judge_results, sessions

__all__ = [
    "MAX_PAGE",
    "MAX_TIME_S",
    "MAX_TURNS",
    "SIGNAL_NAME",
    "SORTS",
    "STATUSES",
    "SessionQuery",
    "fresh_entries",
    "get_session",
    "list_sessions",
    "session_results_for",
    "turn_position",
]

SORTS: Final = {
    "last": sessions.c.last_ns,
    "turns": sessions.c.turns,
    "duration": sessions.c.duration_s,
}
"""Sort keys of the listing: last activity, turns, duration."""
STATUSES: Final = ("open", "closed")
MAX_PAGE: Final = 500
MAX_TURNS: Final = 1000
"""Turns one session answer holds (the first ones, in order); ``turns_truncated`` says when more exist."""
MAX_TIME_S: Final = 9e9
"""Time bounds are clamped to ±this many Unix seconds (nanoseconds must fit a signed 64-bit column)."""
SIGNAL_NAME: Final = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")

_SESSION_FIELDS: Final = (
    "session_id", "agent", "user_id", "first_ns", "last_ns", "turns", "duration_s", "input_tokens",
    "output_tokens", "cost_usd", "turns_flagged", "limit_hits", "blocks", "errors", "thumbs_down", "status",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SessionQuery:
    """Listing filters (``None``: any) and order.

    Attributes:
        agent: the session's agent, exactly.
        user: the session's user id, exactly.
        status: ``open`` or ``closed``.
        flagged: sessions with at least one flagged turn (True) or none (False).
        signal: a session signal name (``reask``, ``abandonment`` …) the session carries.
        since / until: last activity bounds, Unix seconds ([since, until)).
        sort: a key of :data:`SORTS`; ``descending`` its direction.
        limit: page size (≤ :data:`MAX_PAGE`).
    """

    agent: str | None = None
    user: str | None = None
    status: str | None = None
    flagged: bool | None = None
    signal: str | None = None
    since: float | None = None
    until: float | None = None
    sort: str = "last"
    descending: bool = True
    limit: int = 50


def signal_clause(dialect: str, name: str) -> sa.ColumnElement[bool]:
    """Whether a session row's ``signals`` hold one named ``name`` (JSONB containment or ``json_each``)."""
    if dialect == "postgresql":
        return sa.type_coerce(sessions.c.signals, postgresql.JSONB).contains([{"signal": name}])
    each = sa.func.json_each(sessions.c.signals).table_valued("value")
    return sa.exists().select_from(each).where(sa.func.json_extract(each.c.value, "$.signal") == name)


def list_sessions(
    conn: sa.Connection, q: SessionQuery, cursor: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of sessions matching ``q`` and the next page's cursor (``None`` on the last page).

    Raises:
        InvalidCursorError: the cursor is malformed or belongs to another order.
        ValueError: the sort key, the status or the signal name is not acceptable.
    """
    if q.sort not in SORTS:
        raise ValueError(f"unknown sort {q.sort!r}: one of {', '.join(SORTS)}")
    if q.status is not None and q.status not in STATUSES:
        raise ValueError(f"unknown status {q.status!r}: open or closed")
    if q.signal is not None and not SIGNAL_NAME.fullmatch(q.signal):
        raise ValueError(f"bad signal name {q.signal!r}")
    column = SORTS[q.sort]
    query = sa.select(sessions)
    for col, value in ((sessions.c.agent, q.agent), (sessions.c.user_id, q.user), (sessions.c.status, q.status)):
        if value is not None:
            query = query.where(col == value)
    if q.flagged is not None:
        query = query.where(sessions.c.turns_flagged > 0 if q.flagged else sessions.c.turns_flagged == 0)
    if q.signal is not None:
        query = query.where(signal_clause(conn.dialect.name, q.signal))
    if q.since is not None:
        query = query.where(sessions.c.last_ns >= _ns(q.since))
    if q.until is not None:
        query = query.where(sessions.c.last_ns < _ns(q.until))
    if cursor is not None:
        key, session_id = decode_cursor(cursor, "s", q.sort, q.descending)
        if q.descending:
            query = query.where(sa.or_(column < key, sa.and_(column == key, sessions.c.session_id < session_id)))
        else:
            query = query.where(sa.or_(column > key, sa.and_(column == key, sessions.c.session_id > session_id)))
    limit = max(1, min(q.limit, MAX_PAGE))
    order = (
        (column.desc(), sessions.c.session_id.desc()) if q.descending else (column.asc(), sessions.c.session_id.asc())
    )
    rows = conn.execute(query.order_by(*order).limit(limit + 1)).mappings().all()
    page = [_session_dict(row) for row in rows[:limit]]
    if len(rows) <= limit:
        return page, None
    last = rows[limit - 1]
    return page, encode_cursor("s", q.sort, q.descending, last[column.name], last["session_id"])


def get_session(conn: sa.Connection, session_id: str) -> dict[str, Any] | None:
    """One session, ``{session, turns, turns_truncated, judges}``, or ``None`` when it is unknown.

    Each turn is the run's summary (the ``/api/v1/runs`` shape: scores, flag, evidence) with its
    ``turn`` number, its ``review_item_id`` (``None`` when never flagged) and the session
    ``signals`` that name it. A session whose row is not written yet (its first turn is being
    stored) is summed from its turns, ``status`` ``open``. The id of a run without a session id
    (its trace id) answers that run as a session of one. ``judges``: its session judges' verdicts
    (:func:`session_results_for`).
    """
    row = conn.execute(sa.select(sessions).where(sessions.c.session_id == session_id)).mappings().first()
    found = conn.execute(_turns(runs.c.session_id == session_id)).mappings().all()
    if row is None and not found and _TRACE_ID.fullmatch(session_id):  # a run without a session id: a session of one
        alone = _turns(sa.and_(runs.c.trace_id == session_id, runs.c.session_id.is_(None)))
        found = conn.execute(alone).mappings().all()
    if row is None and not found:
        return None
    doc = _session_dict(row) if row is not None else _summed(session_id, found[:MAX_TURNS])
    signals: list[dict[str, Any]] = doc["signals"]
    turns = []
    for number, run in enumerate(found[:MAX_TURNS], 1):
        turn = run_document(run)
        turn.update(
            turn=number,
            review_item_id=run["review_item_id"],
            signals=[s for s in signals if s.get("trace_id") == run["trace_id"]],
        )
        turns.append(turn)
    judges = session_results_for(conn, session_id) if row is not None else []
    return {"session": doc, "turns": turns, "turns_truncated": len(found) > MAX_TURNS, "judges": judges}


def session_results_for(conn: sa.Connection, session_id: str) -> list[dict[str, Any]]:
    """The session's judge verdicts in the API shape, by judge name."""
    t = session_judge_results
    return verdict_documents(conn, t, t.c.session_id == session_id, "session_id")


def _turns(where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    return (
        sa.select(runs, review_items.c.id.label("review_item_id"))
        .select_from(runs.outerjoin(review_items, review_items.c.trace_id == runs.c.trace_id))
        .where(where)
        .order_by(runs.c.start_ns, runs.c.trace_id)
        .limit(MAX_TURNS + 1)
    )


def turn_position(conn: sa.Connection, trace_id: str) -> dict[str, Any] | None:
    """Where a run sits in its session: ``{session_id, user_id, turn, turns, previous, next}``.

    ``previous`` / ``next`` are the neighbour turns' ``{trace_id, turn, status, flagged}`` (``None``
    at either end); ``closed``: the session is closed (its last turn is its last). ``None`` when the
    run is unknown or has no session id (a session of one).
    """
    me = conn.execute(
        sa.select(runs.c.session_id, runs.c.user_id, runs.c.start_ns).where(runs.c.trace_id == trace_id)
    ).first()
    if me is None or me.session_id is None:
        return None
    session_id, start_ns = me.session_id, me.start_ns
    same = runs.c.session_id == session_id
    before = sa.or_(runs.c.start_ns < start_ns, sa.and_(runs.c.start_ns == start_ns, runs.c.trace_id < trace_id))
    after = sa.or_(runs.c.start_ns > start_ns, sa.and_(runs.c.start_ns == start_ns, runs.c.trace_id > trace_id))
    cols = (runs.c.trace_id, runs.c.status, runs.c.flagged)
    earlier = conn.execute(sa.select(sa.func.count()).where(same, before)).scalar_one()
    total = conn.execute(sa.select(sa.func.count()).where(same)).scalar_one()
    prev_row = conn.execute(
        sa.select(*cols).where(same, before).order_by(runs.c.start_ns.desc(), runs.c.trace_id.desc()).limit(1)
    ).first()
    next_row = conn.execute(
        sa.select(*cols).where(same, after).order_by(runs.c.start_ns, runs.c.trace_id).limit(1)
    ).first()
    turn = int(earlier) + 1
    status = conn.execute(sa.select(sessions.c.status).where(sessions.c.session_id == session_id)).scalar()

    def neighbour(found: Any, number: int) -> dict[str, Any] | None:
        if found is None:
            return None
        return {"trace_id": found.trace_id, "turn": number, "status": found.status, "flagged": bool(found.flagged)}

    return {
        "session_id": session_id,
        "user_id": me.user_id,
        "turn": turn,
        "turns": int(total),
        "previous": neighbour(prev_row, turn - 1),
        "next": neighbour(next_row, turn + 1),
        "closed": status == "closed",
    }


def fresh_entries(
    previous: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]]
) -> tuple[list[Mapping[str, Any]], int]:
    """What a turn's conversation adds to the previous turn's: ``(entries, repeated)``. Pure.

    Each LLM call of a turn carries the conversation so far (OTel GenAI ``gen_ai.input.messages``,
    OpenInference ``llm.input_messages`` …), so a turn's conversation (:mod:`review_queue.details`)
    starts with the messages of the turns before it. The messages the previous turn showed (its
    messages and its final answer, in order) are dropped from the start of this turn's, as long as
    they match in order; ``repeated`` counts them. A message the user repeats later (a re-ask)
    comes after that prefix and is kept.
    """
    said = [
        ("assistant" if e.get("kind") == "final" else str(e.get("role", "")), str(e.get("content", "")))
        for e in previous
        if e.get("kind") in ("message", "final")
    ]
    matched = 0
    kept: list[Mapping[str, Any]] = []
    for entry in current:
        if not kept and entry.get("kind") == "message" and matched < len(said):
            mine = (str(entry.get("role", "")), str(entry.get("content", "")))
            while matched < len(said) and said[matched] != mine and said[matched][0] == "assistant":
                matched += 1  # an answer the history does not repeat verbatim (a final answer shown apart)
            if matched < len(said) and said[matched] == mine:
                matched += 1
                continue
        kept.append(entry)
    return kept, len(current) - len(kept)


def _session_dict(row: sa.RowMapping) -> dict[str, Any]:
    doc = {name: row[name] for name in _SESSION_FIELDS}
    doc["signals"] = [dict(s) for s in row["signals"] or [] if isinstance(s, dict)]
    doc["closed_at"] = None if row["closed_at"] is None else _time(row["closed_at"])
    doc["updated_at"] = _time(row["updated_at"])
    return doc


def _summed(session_id: str, turns: Any) -> dict[str, Any]:
    """The session fields of a session without a row yet, from its turns (no signals, no cost)."""
    first = min(t["start_ns"] for t in turns)
    last = max(t["end_ns"] for t in turns)
    return {
        "session_id": session_id,
        "agent": turns[0]["agent"],
        "user_id": next((t["user_id"] for t in turns if t["user_id"]), None),
        "first_ns": first,
        "last_ns": last,
        "turns": len(turns),
        "duration_s": max(0.0, (last - first) / 1e9),
        "input_tokens": sum(t["input_tokens"] for t in turns),
        "output_tokens": sum(t["output_tokens"] for t in turns),
        "cost_usd": 0.0,
        "turns_flagged": sum(1 for t in turns if t["flagged"]),
        "limit_hits": sum(1 for t in turns if t["hit_max_iterations"]),
        "blocks": sum(1 for t in turns if t["safety_blocked"]),
        "errors": sum(1 for t in turns if t["errored"]),
        "thumbs_down": 0,
        "status": "open",
        "signals": [],
        "closed_at": None,
        "updated_at": _time(max(t["updated_at"] for t in turns)),
    }


def _ns(epoch_s: float) -> int:
    return int(max(-MAX_TIME_S, min(MAX_TIME_S, epoch_s)) * 1e9)


def _time(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)
