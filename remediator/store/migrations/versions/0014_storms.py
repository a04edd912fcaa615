"""storms: shared-cause storms (remediator/domain/storms.py), their suspected cause, nodes and group decision

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 16:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "storms",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("cause_key", sa.String(length=512), nullable=False),
        sa.Column("cause_value", sa.String(length=1024), nullable=False),
        sa.Column("cause_text", sa.Text(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("analysis", sa.JSON(), nullable=False),
        sa.Column("timeline", sa.JSON(), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.String(length=256), nullable=True),
        sa.Column("decision_reason", sa.Text(), nullable=True),
        sa.Column("slack_channel", sa.String(length=128), nullable=True),
        sa.Column("slack_ts", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_storms_state", "storms", ["state"])


def downgrade() -> None:
    op.drop_index("ix_storms_state", table_name="storms")
    op.drop_table("storms")
