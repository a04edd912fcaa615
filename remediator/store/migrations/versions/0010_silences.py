"""silences: Alertmanager-model silences served by the controller; an alert one holds starts nothing

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "silences",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("matchers", sa.JSON(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expired_by", sa.String(length=256), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_silences_ends_at", "silences", ["ends_at"])


def downgrade() -> None:
    op.drop_index("ix_silences_ends_at", table_name="silences")
    op.drop_table("silences")
