"""``span_count`` on runs and review items: a re-score from fewer spans never replaces a stored one.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

After a crash or a rebalance the new owner of a partition re-reads from the committed
offset, which can lie past the first records of a run that was already written; that run
is then re-assembled from its tail alone. The upserts now keep the stored scoring unless
the new one saw at least as many spans. Existing rows start at 0 (any re-score replaces them).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add ``span_count`` (default 0) to ``runs`` and ``review_items``."""
    for table in ("runs", "review_items"):  # plain ADD COLUMN on both (no SQLite table rebuild)
        op.add_column(table, sa.Column("span_count", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    """Drop the columns."""
    for table in ("review_items", "runs"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("span_count")
