"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02 19:07:37.225589
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_batches",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("receiver", sa.String(length=1024), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("external_url", sa.Text(), nullable=False),
        sa.Column("truncated_alerts", sa.Integer(), nullable=False),
        sa.Column("alert_count", sa.Integer(), nullable=False),
        sa.Column("repeat_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "audit_events",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("remediation_id", sa.String(length=36), nullable=True),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=256), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("hash"),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_events_kind"), ["kind"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_remediation_id"), ["remediation_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_ts"), ["ts"], unique=False)

    op.create_table(
        "controller_state",
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "remediations",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("rule", sa.String(length=256), nullable=False),
        sa.Column("playbook", sa.String(length=256), nullable=False),
        sa.Column("definitions_version", sa.String(length=64), nullable=False),
        sa.Column("target_kind", sa.String(length=16), nullable=False),
        sa.Column("target_key", sa.String(length=512), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("gpu_uuid", sa.String(length=128), nullable=True),
        sa.Column("gpu_index", sa.String(length=16), nullable=True),
        sa.Column("namespace", sa.String(length=253), nullable=True),
        sa.Column("pod", sa.String(length=253), nullable=True),
        sa.Column("alert_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("alert_fingerprint", sa.String(length=64), nullable=False),
        sa.Column("alertname", sa.String(length=256), nullable=False),
        sa.Column("alert_labels", sa.JSON(), nullable=False),
        sa.Column("alert_annotations", sa.JSON(), nullable=False),
        sa.Column("alert_resolved", sa.Boolean(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("current_step", sa.Integer(), nullable=False),
        sa.Column("active_key", sa.String(length=800), nullable=True),
        sa.Column("quarantined", sa.Boolean(), nullable=False),
        sa.Column("linked_alerts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=128), nullable=True),
        sa.Column("lease_expires", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("approval_token_hash", sa.String(length=64), nullable=True),
        sa.Column("approval_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("approval_step", sa.Integer(), nullable=True),
        sa.Column("decided_by", sa.String(length=256), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decision", sa.String(length=16), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("active_key"),
        sa.UniqueConstraint("approval_token_hash"),
    )
    with op.batch_alter_table("remediations", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_remediations_alert_fingerprint"), ["alert_fingerprint"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_remediations_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_remediations_node"), ["node"], unique=False)
        batch_op.create_index(batch_op.f("ix_remediations_playbook"), ["playbook"], unique=False)
        batch_op.create_index("ix_remediations_runnable", ["state", "next_run_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_remediations_state"), ["state"], unique=False)
        batch_op.create_index(batch_op.f("ix_remediations_target_key"), ["target_key"], unique=False)

    op.create_table(
        "alerts",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("batch_id", sa.String(length=32), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("alertname", sa.String(length=256), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("generator_url", sa.Text(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dedup_key", sa.String(length=200), nullable=True),
        sa.Column("repeat_of", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("claimed_by", sa.String(length=128), nullable=True),
        sa.Column("claim_expires", sa.DateTime(timezone=True), nullable=True),
        sa.Column("processed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=64), nullable=True),
        sa.Column("remediation_id", sa.String(length=36), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["alert_batches.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dedup_key"),
    )
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alerts_alertname"), ["alertname"], unique=False)
        batch_op.create_index(batch_op.f("ix_alerts_batch_id"), ["batch_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_alerts_fingerprint"), ["fingerprint"], unique=False)
        batch_op.create_index(batch_op.f("ix_alerts_remediation_id"), ["remediation_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_alerts_state"), ["state"], unique=False)
        batch_op.create_index("ix_alerts_state_claim", ["state", "claim_expires"], unique=False)

    op.create_table(
        "steps",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("remediation_id", sa.String(length=36), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("action", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("output", sa.JSON(), nullable=False),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["remediation_id"],
            ["remediations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("remediation_id", "phase", "idx", name="uq_steps_position"),
    )
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_steps_remediation_id"), ["remediation_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_steps_remediation_id"))

    op.drop_table("steps")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_index("ix_alerts_state_claim")
        batch_op.drop_index(batch_op.f("ix_alerts_state"))
        batch_op.drop_index(batch_op.f("ix_alerts_remediation_id"))
        batch_op.drop_index(batch_op.f("ix_alerts_fingerprint"))
        batch_op.drop_index(batch_op.f("ix_alerts_batch_id"))
        batch_op.drop_index(batch_op.f("ix_alerts_alertname"))

    op.drop_table("alerts")
    with op.batch_alter_table("remediations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_remediations_target_key"))
        batch_op.drop_index(batch_op.f("ix_remediations_state"))
        batch_op.drop_index("ix_remediations_runnable")
        batch_op.drop_index(batch_op.f("ix_remediations_playbook"))
        batch_op.drop_index(batch_op.f("ix_remediations_node"))
        batch_op.drop_index(batch_op.f("ix_remediations_created_at"))
        batch_op.drop_index(batch_op.f("ix_remediations_alert_fingerprint"))

    op.drop_table("remediations")
    op.drop_table("controller_state")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_ts"))
        batch_op.drop_index(batch_op.f("ix_audit_events_remediation_id"))
        batch_op.drop_index(batch_op.f("ix_audit_events_kind"))

    op.drop_table("audit_events")
    op.drop_table("alert_batches")
