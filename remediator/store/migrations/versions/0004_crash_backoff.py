"""crash backoff: how often a remediation crashed the worker, until when it waits, and its last error

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("remediations") as batch:
        batch.add_column(sa.Column("crashes", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("remediations") as batch:
        batch.drop_column("error")
        batch.drop_column("not_before")
        batch.drop_column("crashes")
