"""``evidence`` on runs: why each headline signal and flag reason is set.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

A JSON list of :class:`scorers.model.Evidence` dicts (signal, detection rule, span id and name,
source, matched value). Existing rows have none (NULL, shown as an empty list).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from review_queue.tables import JSON_TYPE

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add ``evidence`` (nullable JSON) to ``runs``."""
    op.add_column("runs", sa.Column("evidence", JSON_TYPE, nullable=True))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("evidence")
