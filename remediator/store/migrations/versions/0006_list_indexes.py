"""list indexes: the remediation list by state or node newest first, and quarantine starts by time

The remediation list (`GET /api/v1/remediations`, the UI index) filters by state and/or node and orders by
created_at; with single-column indexes every filtered page sorted all matching rows (80,000 at 100,000
stored). The composite indexes return a page in order. `ix_audit_events_kind_ts` answers the guardrail
banner's count of recent quarantine starts from the index alone, and `ix_remediations_quarantined_node` its
list of quarantined nodes (it read every remediation row). Each composite replaces the index it extends.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06 09:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_remediations_state_created", "remediations", ["state", "created_at"])
    op.create_index("ix_remediations_node_state_created", "remediations", ["node", "state", "created_at"])
    op.create_index("ix_remediations_quarantined_node", "remediations", ["quarantined", "node"])
    op.create_index("ix_audit_events_kind_ts", "audit_events", ["kind", "ts"])
    op.drop_index("ix_remediations_state", table_name="remediations")
    op.drop_index("ix_remediations_node", table_name="remediations")
    op.drop_index("ix_audit_events_kind", table_name="audit_events")


def downgrade() -> None:
    op.create_index("ix_audit_events_kind", "audit_events", ["kind"])
    op.create_index("ix_remediations_node", "remediations", ["node"])
    op.create_index("ix_remediations_state", "remediations", ["state"])
    op.drop_index("ix_audit_events_kind_ts", table_name="audit_events")
    op.drop_index("ix_remediations_quarantined_node", table_name="remediations")
    op.drop_index("ix_remediations_node_state_created", table_name="remediations")
    op.drop_index("ix_remediations_state_created", table_name="remediations")
