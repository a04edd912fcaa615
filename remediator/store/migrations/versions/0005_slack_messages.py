"""slack messages: the Slack message (channel, ts) per remediation that the bot edits in place

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slack_messages",
        sa.Column("remediation_id", sa.String(length=36), nullable=False),
        sa.Column("channel", sa.String(length=64), nullable=False),
        sa.Column("ts", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("remediation_id"),
    )


def downgrade() -> None:
    op.drop_table("slack_messages")
