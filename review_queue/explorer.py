"""The runs explorer's query: every stored run, filtered, sorted, one keyset page at a time.

Filters: agent, service, status, session, user, each headline signal, flagged or not, flag reason, a score
range, a time range (index time), a trace-id prefix and text in what the user asked or the final answer
(:mod:`review_queue.search`; the run's details, :mod:`review_queue.details`, keep both for their retention).
Sorting by index time, duration, LLM calls, tool errors or tokens, either way, with a cursor that stays valid under
inserts. Every value reaches SQL as a bound parameter; names (sort column, score name) are
checked against a list or a pattern first.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from review_queue.queries import InvalidCursorError, reason_filter_for
from review_queue.search import text_match
from review_queue.tables import run_details, runs

__all__ = ["SIGNALS", "SORTS", "RunQuery", "decode_cursor", "encode_cursor", "explore", "score_value"]

SIGNALS: Final = ("hit_max_iterations", "safety_blocked", "errored")
SORTS: Final = {
    "created": runs.c.created_at,
    "duration": runs.c.duration_s,
    "llm_calls": runs.c.llm_calls,
    "tool_errors": runs.c.tool_errors,
    "tokens": runs.c.input_tokens,
}
MAX_PAGE: Final = 200
_SCORE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_HEX = re.compile(r"[0-9a-f]{1,32}")


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Explorer filters (``None``/empty: any) and order.

    Attributes:
        agent / service / status: exact matches.
        session / user: the run's session id / end-user id, exact matches.
        signals: headline signal name to required value.
        flagged: flagged (True) or not (False).
        reason: a flag reason the run must carry.
        score / score_min / score_max: a score name and its inclusive bounds.
        since / until: index time bounds, Unix seconds ([since, until)).
        trace: a trace-id prefix (hex).
        text: a substring of the user message or the final answer (:func:`review_queue.search.text_match`).
        sort: a key of :data:`SORTS`; ``descending`` its direction.
        limit: page size (≤ :data:`MAX_PAGE`).
    """

    agent: str | None = None
    service: str | None = None
    status: str | None = None
    session: str | None = None
    user: str | None = None
    signals: tuple[tuple[str, bool], ...] = ()
    flagged: bool | None = None
    reason: str | None = None
    score: str | None = None
    score_min: float | None = None
    score_max: float | None = None
    since: float | None = None
    until: float | None = None
    trace: str | None = None
    text: str | None = None
    sort: str = "created"
    descending: bool = True
    limit: int = 50


def score_value(dialect: str, name: str) -> sa.ColumnElement[Any]:
    """A run's score ``name`` read from ``runs.scores`` in SQL (NULL when the run has none).

    Args:
        dialect: the connection's SQL dialect name (``postgresql`` reads JSONB, others ``json_extract``).
        name: the score's name; the caller checks it (it is spliced into a JSON path).
    """
    if dialect == "postgresql":
        return sa.cast(sa.type_coerce(runs.c.scores, postgresql.JSONB)[name].astext, sa.Float)
    return sa.func.json_extract(runs.c.scores, f'$."{name}"')


def explore(conn: sa.Connection, q: RunQuery, cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """One page of runs matching ``q`` and the next page's cursor (``None`` on the last page).

    Raises:
        InvalidCursorError: the cursor is malformed or belongs to another order.
        ValueError: the sort key or the score name is not acceptable.
    """
    if q.sort not in SORTS:
        raise ValueError(f"unknown sort {q.sort!r}")
    dialect = conn.dialect.name
    column = SORTS[q.sort]
    query = sa.select(
        runs.c.trace_id,
        runs.c.agent,
        runs.c.service,
        runs.c.status,
        runs.c.duration_s,
        runs.c.llm_calls,
        runs.c.tool_calls,
        runs.c.tool_errors,
        runs.c.input_tokens,
        runs.c.output_tokens,
        runs.c.hit_max_iterations,
        runs.c.safety_blocked,
        runs.c.errored,
        runs.c.flagged,
        runs.c.flag_reasons,
        runs.c.scores,
        runs.c.created_at,
        runs.c.start_ns,
        runs.c.cost_usd,
        runs.c.session_id,
        runs.c.user_id,
        run_details.c.final_output,
        run_details.c.user_message,
    ).select_from(runs.outerjoin(run_details, run_details.c.trace_id == runs.c.trace_id))
    for name, value in (
        ("agent", q.agent), ("service", q.service), ("status", q.status), ("session_id", q.session),
        ("user_id", q.user),
    ):  # fmt: skip
        if value:
            query = query.where(runs.c[name] == value)
    for name, wanted in q.signals:
        if name in SIGNALS:
            query = query.where(runs.c[name].is_(wanted))
    if q.flagged is not None:
        query = query.where(runs.c.flagged.is_(q.flagged))
    if q.reason:
        query = query.where(reason_filter_for(dialect)(q.reason))
    if q.score and (q.score_min is not None or q.score_max is not None):
        if not _SCORE_NAME.fullmatch(q.score):
            raise ValueError(f"bad score name {q.score!r}")
        score = score_value(dialect, q.score)
        if q.score_min is not None:
            query = query.where(score >= q.score_min)
        if q.score_max is not None:
            query = query.where(score <= q.score_max)
    if q.since is not None:
        query = query.where(runs.c.created_at >= q.since)
    if q.until is not None:
        query = query.where(runs.c.created_at < q.until)
    if q.trace:
        prefix = q.trace.lower()
        if not _HEX.fullmatch(prefix):
            return [], None
        query = query.where(runs.c.trace_id.like(prefix + "%"))
    if q.text:
        query = query.where(text_match(dialect, q.text))
    if cursor is not None:
        key, trace_id = decode_cursor(cursor, "x", q.sort, q.descending)
        if q.descending:
            query = query.where(sa.or_(column < key, sa.and_(column == key, runs.c.trace_id < trace_id)))
        else:
            query = query.where(sa.or_(column > key, sa.and_(column == key, runs.c.trace_id > trace_id)))
    limit = max(1, min(q.limit, MAX_PAGE))
    order = (column.desc(), runs.c.trace_id.desc()) if q.descending else (column.asc(), runs.c.trace_id.asc())
    rows = [dict(r) for r in conn.execute(query.order_by(*order).limit(limit + 1)).mappings()]
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    sort_value = last[column.name]
    return rows[:limit], encode_cursor("x", q.sort, q.descending, sort_value, last["trace_id"])


def encode_cursor(listing: str, sort: str, descending: bool, value: Any, key: str) -> str:
    """The keyset cursor of a listing's page: its ``listing`` tag (``"x"`` runs, ``"s"`` sessions), its
    order, and the last row's sort value and key, as URL-safe base64 of a JSON array."""
    raw = json.dumps([listing, sort, descending, value, key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(cursor: str, listing: str, sort: str, descending: bool) -> tuple[float, str]:
    """``(sort value, key)`` of a cursor :func:`encode_cursor` made for this listing and order.

    Raises:
        InvalidCursorError: malformed, or made for another listing or order.
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursorError("malformed cursor") from exc
    if (
        not isinstance(value, list)
        or len(value) != 5
        or value[:3] != [listing, sort, descending]
        or isinstance(value[3], bool)
        or not isinstance(value[3], int | float)
        or not isinstance(value[4], str)
    ):
        raise InvalidCursorError("the cursor belongs to another listing or order")
    return value[3], value[4]
