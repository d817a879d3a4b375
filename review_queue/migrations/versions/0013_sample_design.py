"""The review sample as a design: ``sample_p``, ``sample_drawn``, ``rule_flagged`` of runs and sessions.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02

Every run records, when its flag is first decided, its probability of entering the random review
stratum (the rate in force; 0 while the queue shed), whether it entered, whether a rule flagged it
and whether shedding suspended the stratum (:class:`scorers.model.SampleDesign`). The quality
estimates (:mod:`review_queue.quality`) weight the reviewed members of the stratum by these. Runs
stored before this revision keep NULL: no design is known for them, and the estimates leave them out
and count them. A session records the same (but shedding, which sessions do not go through) at its
first close. ``ix_runs_design`` covers the estimates' window counts (a week of runs read from the
index alone: 3.5 s → 1.0 s for 300,000 runs on SQLite).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add the four design columns of ``runs`` and the three of ``sessions``."""
    op.add_column("runs", sa.Column("sample_p", sa.Double(), nullable=True))
    op.add_column("runs", sa.Column("sample_drawn", sa.Boolean(), nullable=True))
    op.add_column("runs", sa.Column("rule_flagged", sa.Boolean(), nullable=True))
    op.add_column("runs", sa.Column("sample_shed", sa.Boolean(), nullable=True))
    op.add_column("sessions", sa.Column("sample_p", sa.Double(), nullable=True))
    op.add_column("sessions", sa.Column("sample_drawn", sa.Boolean(), nullable=True))
    op.add_column("sessions", sa.Column("rule_flagged", sa.Boolean(), nullable=True))
    op.create_index(
        "ix_runs_design", "runs", ["created_at", "agent", "rule_flagged", "sample_p", "sample_drawn", "task_completed"]
    )


def downgrade() -> None:
    """Drop the design columns."""
    op.drop_index("ix_runs_design", table_name="runs")
    with op.batch_alter_table("sessions") as batch:
        for name in ("rule_flagged", "sample_drawn", "sample_p"):
            batch.drop_column(name)
    with op.batch_alter_table("runs") as batch:
        for name in ("sample_shed", "rule_flagged", "sample_drawn", "sample_p"):
            batch.drop_column(name)
