"""Read side of the store: run and queue listings with keyset cursors, and queue statistics.

Every function takes an open :class:`sqlalchemy.Connection` and returns plain dicts in the
shape the REST API serves, so the API, the web UI and the tests read the same thing.
Cursors are opaque URL-safe base64 of a JSON keyset; they stay valid under inserts.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from review_queue.errors import ReviewQueueError
from review_queue.model import ItemState
from review_queue.search import text_match
from review_queue.tables import review_items, run_details, runs
from scorers.model import OUTCOME_FIELDS, Priority

__all__ = [
    "InvalidCursorError",
    "QueueStat",
    "ReasonFilter",
    "get_run",
    "list_queue",
    "list_runs",
    "queue_stats",
    "reason_filter_for",
    "run_document",
]

ReasonFilter = Callable[[str], sa.ColumnElement[bool]]
"""Builds the dialect's "``runs.flag_reasons`` contains this reason" clause."""


class InvalidCursorError(ReviewQueueError, ValueError):
    """A pagination cursor is malformed or belongs to another listing."""


@dataclass(frozen=True, slots=True)
class QueueStat:
    """Review items of one (state, priority) group.

    Attributes:
        state: the item state.
        priority: the item priority.
        count: number of items.
        oldest_created_at: the oldest item's creation time, Unix epoch seconds.
    """

    state: ItemState
    priority: Priority
    count: int
    oldest_created_at: float


def reason_filter_for(dialect_name: str) -> ReasonFilter:
    """Return the reason-containment clause builder of a dialect (``postgresql`` or ``sqlite``)."""
    if dialect_name == "postgresql":
        return lambda reason: sa.type_coerce(runs.c.flag_reasons, postgresql.JSONB).contains([reason])

    def sqlite_contains(reason: str) -> sa.ColumnElement[bool]:
        each = sa.func.json_each(runs.c.flag_reasons).table_valued("value")
        return sa.exists().select_from(each).where(each.c.value == reason)

    return sqlite_contains


def get_run(conn: sa.Connection, trace_id: str) -> dict[str, Any] | None:
    """Return one run with its ``review_item`` (or ``None`` when unflagged), or ``None`` if unknown."""
    item = review_items.alias("item")
    query = (
        sa.select(runs, *[c.label(f"item_{c.name}") for c in item.c])
        .select_from(runs.outerjoin(item, item.c.trace_id == runs.c.trace_id))
        .where(runs.c.trace_id == trace_id)
    )
    row = conn.execute(query).mappings().first()
    if row is None:
        return None
    doc = _run_dict(row)
    doc["review_item"] = None if row["item_id"] is None else _item_dict(row)
    return doc


def list_runs(
    conn: sa.Connection,
    reason_filter: ReasonFilter,
    *,
    agent: str | None,
    flagged: bool | None,
    reason: str | None,
    limit: int,
    cursor: str | None,
    session: str | None = None,
    user: str | None = None,
    text: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Return one page of runs, newest first, and the cursor of the next page (or ``None``).

    ``text``: only runs whose user message or final answer contains it (:func:`review_queue.search.text_match`).

    "Newest" is the time the run entered the index (``created_at``), ties broken by trace id:
    re-scores do not move a run, so paging never repeats or skips one.

    Raises:
        InvalidCursorError: ``cursor`` is not one this function returned.
    """
    query = (
        sa.select(runs, run_details.c.user_message)
        .select_from(runs.outerjoin(run_details, run_details.c.trace_id == runs.c.trace_id))
        .order_by(runs.c.created_at.desc(), runs.c.trace_id.desc())
        .limit(limit + 1)
    )
    if agent is not None:
        query = query.where(runs.c.agent == agent)
    if flagged is not None:
        query = query.where(runs.c.flagged == flagged)
    if reason is not None:
        query = query.where(reason_filter(reason))
    if session is not None:
        query = query.where(runs.c.session_id == session)
    if user is not None:
        query = query.where(runs.c.user_id == user)
    if text:
        query = query.where(text_match(conn.dialect.name, text))
    if cursor is not None:
        created, trace_id = _decode(cursor, "r", (float, str))
        query = query.where(
            sa.or_(
                runs.c.created_at < created,
                sa.and_(runs.c.created_at == created, runs.c.trace_id < trace_id),
            )
        )
    rows = conn.execute(query).mappings().all()
    page = [{**_run_dict(row), "user_message": row["user_message"]} for row in rows[:limit]]
    if len(rows) <= limit:
        return page, None
    last = rows[limit - 1]
    return page, _encode("r", [last["created_at"], last["trace_id"]])


def list_queue(
    conn: sa.Connection, *, limit: int, cursor: str | None, where: Sequence[sa.ColumnElement[bool]] = ()
) -> tuple[list[dict[str, Any]], str | None]:
    """Return one page of items, highest priority first then oldest, and the next cursor.

    ``where``: the filter's clauses over ``review_items`` joined with ``runs``
    (:func:`review_queue.listing.where`); pending items when empty.

    Raises:
        InvalidCursorError: ``cursor`` is not one this function returned.
    """
    item = review_items
    query = (
        sa.select(item, runs.c.agent, run_details.c.user_message)
        .join(runs, runs.c.trace_id == item.c.trace_id)
        .outerjoin(run_details, run_details.c.trace_id == item.c.trace_id)
        .where(*(where or (item.c.state == ItemState.PENDING.value,)))
        .order_by(item.c.priority_rank.desc(), item.c.created_at.asc(), item.c.id.asc())
        .limit(limit + 1)
    )
    if cursor is not None:
        rank, created, item_id = _decode(cursor, "q", (int, float, int))
        query = query.where(
            sa.or_(
                item.c.priority_rank < rank,
                sa.and_(
                    item.c.priority_rank == rank,
                    sa.or_(
                        item.c.created_at > created,
                        sa.and_(item.c.created_at == created, item.c.id > item_id),
                    ),
                ),
            )
        )
    rows = conn.execute(query).mappings().all()
    page = [_queue_dict(row) for row in rows[:limit]]
    if len(rows) <= limit:
        return page, None
    last = rows[limit - 1]
    return page, _encode("q", [last["priority_rank"], last["created_at"], last["id"]])


def queue_stats(conn: sa.Connection) -> list[QueueStat]:
    """Return item count and oldest creation time per (state, priority), in one ``GROUP BY``."""
    query = sa.select(
        review_items.c.state,
        review_items.c.priority,
        sa.func.count(),
        sa.func.min(review_items.c.created_at),
    ).group_by(review_items.c.state, review_items.c.priority)
    return [
        QueueStat(ItemState(state), Priority(priority), int(count), float(oldest))
        for state, priority, count, oldest in conn.execute(query)
    ]


def run_document(row: sa.RowMapping) -> dict[str, Any]:
    """A ``runs`` row (every column selected) as the API's run summary: flag, evidence, times."""
    return _run_dict(row)


def _run_dict(row: sa.RowMapping) -> dict[str, Any]:
    flag = None
    if row["flagged"]:
        flag = {
            "reasons": list(row["flag_reasons"] or []),
            "priority": row["flag_priority"],
            "sample_rate": row["sample_rate"],
        }
    doc = {name: row[name] for name in _RUN_FIELDS}
    doc.update(
        flag=flag,
        evidence=list(row["evidence"] or []),
        created_at=_time(row["created_at"]),
        updated_at=_time(row["updated_at"]),
    )
    return doc


_RUN_FIELDS = (
    "trace_id",
    "agent",
    "service",
    "dialect",
    "status",
    "complete",
    "start_ns",
    "end_ns",
    "duration_s",
    *OUTCOME_FIELDS,
    "error_type",
    "scores",
    "scorer_errors",
    "version",
    "session_id",
    "user_id",
)


def _item_fields(row: sa.RowMapping, prefix: str = "") -> dict[str, Any]:
    """The review item columns every view shows (``prefix``: how the query labelled them)."""
    item = {name: row[prefix + name] for name in ("id", "state", "priority", "sample_rate")}
    item["reasons"] = list(row[prefix + "reasons"])
    item["created_at"] = _time(row[prefix + "created_at"])
    item["updated_at"] = _time(row[prefix + "updated_at"])
    return item


def _item_dict(row: sa.RowMapping) -> dict[str, Any]:
    return {**_item_fields(row, "item_"), "snapshot": row["item_snapshot"]}


def _queue_dict(row: sa.RowMapping) -> dict[str, Any]:
    fields = {"trace_id": row["trace_id"], "agent": row["agent"], "user_message": row["user_message"]}
    return {**_item_fields(row), **fields}


def _time(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def _encode(kind: str, key: list[Any]) -> str:
    raw = json.dumps([kind, *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _decode(cursor: str, kind: str, types: tuple[type, ...]) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursorError(f"malformed cursor {cursor!r}") from exc
    if not isinstance(value, list) or len(value) != len(types) + 1 or value[0] != kind:
        raise InvalidCursorError(f"cursor {cursor!r} does not belong to this listing")
    key = value[1:]
    for i, (part, expected) in enumerate(zip(key, types, strict=True)):
        if expected is float and isinstance(part, int) and not isinstance(part, bool):
            key[i] = float(part)
        elif not isinstance(part, expected) or isinstance(part, bool):
            raise InvalidCursorError(f"cursor {cursor!r} has a bad key")
    return key
