"""planned state: a plan-only run that ended `succeeded` with a `plan-only` reason is stored as `planned`

Plan-only runs (no cluster credentials, or DRY_RUN) end in their own state, `planned` (domain/states.py), so the
API, the CLI, the UI, the metrics and the `?state=` filter read one name. Rows written before that ended
`succeeded` with the reason `plan-only: nothing was changed`; they are moved to `planned`. Downgrade moves them
back (the reason still says plan-only).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-10 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_remediations = sa.table("remediations", sa.column("state", sa.String(32)), sa.column("state_reason", sa.Text()))


def upgrade() -> None:
    op.get_bind().execute(
        _remediations.update()
        .where(_remediations.c.state == "succeeded", _remediations.c.state_reason.like("plan-only%"))
        .values(state="planned")
    )


def downgrade() -> None:
    op.get_bind().execute(
        _remediations.update().where(_remediations.c.state == "planned").values(state="succeeded")
    )
