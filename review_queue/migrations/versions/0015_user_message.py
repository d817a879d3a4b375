"""``user_message`` on run_details: what the user asked in the run, for the lists and the search.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02

The run's user message (:func:`review_queue.sessions.user_message`: a turn's own, not the history its
chat calls repeat), redacted and cut like the final answer beside it (2,048 characters), written by the
details writer with the rest of the run's details. The queue and the runs explorer show it; the runs
search (:mod:`review_queue.search`) matches it with the final answer. Existing rows have none (NULL:
they show no user message and the search matches their final answer only).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add ``user_message`` (nullable text) to ``run_details``."""
    op.add_column("run_details", sa.Column("user_message", sa.Text(), nullable=True))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("run_details") as batch:
        batch.drop_column("user_message")
