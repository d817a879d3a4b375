"""``ui_sessions``: server-side reviewer UI sessions, ended on logout and on token revocation.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25

Before this, a session was only a signed cookie valid for 12 h: logging out deleted it in the
browser, but a copied cookie kept working. Now the cookie carries a random session id whose
SHA-256 is stored here, and a session is valid only while its row is neither ended nor expired.
Sessions issued before the upgrade carry no id and are no longer accepted (users log in again).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

_ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Create ``ui_sessions`` and its indexes."""
    op.create_table(
        "ui_sessions",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("token_id", _ID_TYPE, nullable=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("ended_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id_hash", name="pk_ui_sessions"),
    )
    op.create_index("ix_ui_sessions_token", "ui_sessions", ["token_id"])
    op.create_index("ix_ui_sessions_expires", "ui_sessions", ["expires_at"])


def downgrade() -> None:
    """Drop the table."""
    op.drop_table("ui_sessions")
