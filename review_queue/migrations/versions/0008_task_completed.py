"""``task_completed`` on runs: whether the run completed its task when scored.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25

:func:`scorers.slo.task_completed` at scoring time, so that a failing review verdict can revoke
the completion exactly once (``vigil_task_completions_revoked_total``). Existing rows have none
(NULL: their completion was never counted, so a verdict revokes nothing).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add ``task_completed`` (nullable boolean) to ``runs``."""
    op.add_column("runs", sa.Column("task_completed", sa.Boolean(), nullable=True))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("task_completed")
