"""storms.approval_links: the SHA-256 of each approve-group link sent for a storm (engine/storm_notices.py)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("storms") as batch:
        batch.add_column(sa.Column("approval_links", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("storms") as batch:
        batch.drop_column("approval_links")
