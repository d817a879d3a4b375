"""Verdict targets: ``review_verdicts.target`` and ``target_trace_id``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28

A verdict on a session item (:mod:`review_queue.session_close`) judges the whole session or one
of its turns; a verdict on any other item judges its run. ``target`` is ``run``, ``session`` or
``turn``; ``target_trace_id`` is the run the verdict applies to: the item's run (``trace_id``) for a
``run`` verdict, the turn for a ``turn`` verdict, null for a ``session`` verdict. Every existing
verdict stays a ``run`` verdict on its item's run (the server default and a backfill).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add the two columns; existing rows become ``run`` verdicts on their item's run."""
    op.add_column("review_verdicts", sa.Column("target", sa.String(8), nullable=False, server_default="run"))
    op.add_column("review_verdicts", sa.Column("target_trace_id", sa.String(32), nullable=True))
    op.execute("UPDATE review_verdicts SET target_trace_id = trace_id")


def downgrade() -> None:
    """Drop the two columns."""
    with op.batch_alter_table("review_verdicts") as batch:
        batch.drop_column("target_trace_id")
        batch.drop_column("target")
