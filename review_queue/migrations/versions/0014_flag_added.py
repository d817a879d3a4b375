"""Reasons added to a run's flag after scoring: ``runs.flag_added``.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02

A session rule or session judge, a run judge and a send-to-review add reasons to a run's flag after
the scorer wrote it; a re-score of the run (its trace re-sent, or late spans) replaced the whole flag and
dropped them — and turned a session's item back into its last turn's. The column keeps what was added
(``{"reasons": [...], "priority": ..., "session_id": ...}``) so a re-score can keep it. Filled here from
the audit trail of the items already flagged that way (``session_flag`` and ``send_to_review`` events)
and from the failing verdicts of run judges whose reason the run's flag carries.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_RANK = {"low": 0, "normal": 1, "high": 2}


def _loaded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def upgrade() -> None:
    """Add ``runs.flag_added`` and fill it from the review events and judge verdicts."""
    op.add_column("runs", sa.Column("flag_added", _JSON, nullable=True))
    conn = op.get_bind()
    meta = sa.MetaData()
    runs = sa.Table("runs", meta, autoload_with=conn)
    items = sa.Table("review_items", meta, autoload_with=conn)
    events = sa.Table("review_events", meta, autoload_with=conn)
    judges = sa.Table("judge_results", meta, autoload_with=conn)
    added: dict[str, dict[str, Any]] = {}

    def add(trace_id: str, reasons: list[str], priority: str, session_id: str | None = None) -> None:
        doc = added.setdefault(trace_id, {"reasons": [], "priority": priority})
        doc["reasons"] += [r for r in reasons if r not in doc["reasons"]]
        if _RANK.get(priority, 1) > _RANK.get(doc["priority"], 1):
            doc["priority"] = priority
        if session_id:
            doc["session_id"] = session_id

    flagged = sa.select(items.c.trace_id, events.c.action, events.c.detail, items.c.priority).select_from(
        events.join(items, items.c.id == events.c.item_id)
    )
    for trace_id, action, stored, priority in conn.execute(
        flagged.where(events.c.action.in_(("session_flag", "send_to_review"))).order_by(events.c.id)
    ):
        detail = _loaded(stored) or {}
        if action == "session_flag":
            add(trace_id, list(detail.get("reasons") or []), priority, detail.get("session_id"))
        else:
            add(trace_id, ["manual"], "normal")
    failing = sa.select(judges.c.trace_id, judges.c.judge, runs.c.flag_reasons, runs.c.flag_priority).select_from(
        judges.join(runs, runs.c.trace_id == judges.c.trace_id)
    )
    for trace_id, judge, reasons, priority in conn.execute(failing.where(judges.c.passed.is_(False))):
        reason = f"judge_{judge}"
        if reason in (_loaded(reasons) or []):
            add(trace_id, [reason], priority or "normal")
    for trace_id, doc in added.items():
        conn.execute(sa.update(runs).where(runs.c.trace_id == trace_id).values(flag_added=doc))


def downgrade() -> None:
    """Drop ``runs.flag_added`` (SQLite's own ``DROP COLUMN``: a batch copy of ``runs`` would cascade-delete its
    review items)."""
    op.drop_column("runs", "flag_added")
