"""remediation phase derived from the state: the `phase` column of `remediations` goes

`remediations.phase` was `revert` from the moment a remediation entered `reverting`, which the state already
says (`domain/states.py: phase_of`). Steps keep their own `phase` (forward, revert, gate).

Downgrade restores the column: `revert` for a remediation that is reverting or reverted, or that ever entered
`reverting` (its `state.reverting` audit event, or a revert or gate step), else `forward`.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_remediations = sa.table("remediations", sa.column("id", sa.String(36)), sa.column("state", sa.String(32)),
                         sa.column("phase", sa.String(16)))
_steps = sa.table("steps", sa.column("remediation_id", sa.String(36)), sa.column("phase", sa.String(16)))
_audit = sa.table("audit_events", sa.column("remediation_id", sa.String(36)), sa.column("kind", sa.String(64)))


def upgrade() -> None:
    with op.batch_alter_table("remediations", schema=None) as batch_op:
        batch_op.drop_column("phase")


def downgrade() -> None:
    with op.batch_alter_table("remediations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("phase", sa.String(length=16), nullable=False, server_default="forward"))
    reverted = sa.or_(
        _remediations.c.state.in_(("reverting", "reverted")),
        _remediations.c.id.in_(sa.select(_audit.c.remediation_id).where(_audit.c.kind == "state.reverting")),
        _remediations.c.id.in_(sa.select(_steps.c.remediation_id).where(_steps.c.phase.in_(("revert", "gate")))),
    )
    op.get_bind().execute(_remediations.update().where(reverted).values(phase="revert"))
    with op.batch_alter_table("remediations", schema=None) as batch_op:
        batch_op.alter_column("phase", existing_type=sa.String(length=16), server_default=None)
