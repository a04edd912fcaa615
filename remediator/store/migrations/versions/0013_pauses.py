"""pauses: scoped, timed pauses (all, nodes by name or label selector, playbooks), with author, reason and end

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 15:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pauses",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("selector", sa.String(length=1024), nullable=True),
        sa.Column("playbooks", sa.JSON(), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_by", sa.String(length=256), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_pauses_ended_at", "pauses", ["ended_at"])


def downgrade() -> None:
    op.drop_index("ix_pauses_ended_at", table_name="pauses")
    op.drop_table("pauses")
