"""forced return to service: the person's request (who, why, which gate steps to skip) on the remediation

`remediator return` moves a remediation that still holds its node or GPU to `reverting` and records the
request in `remediations.return_request` (JSON: actor, reason, skip, at); the undo reads it to skip the named
gate steps and to end in `returned` instead of `reverted`. Null for every other remediation.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-11 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("remediations") as batch:
        batch.add_column(sa.Column("return_request", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("remediations") as batch:
        batch.drop_column("return_request")
