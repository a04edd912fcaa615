"""SQLAlchemy 2 table models. The schema itself is owned by the Alembic migrations next to this file."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AlertBatch", "AlertRow", "Approval", "AuditEvent", "Base", "ControllerState", "Remediation", "StepRow",
]

Json = dict[str, Any]
IdType = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    type_annotation_map = {Json: JSON, datetime: DateTime(timezone=True), list[Any]: JSON}


class AlertBatch(Base):
    """One webhook delivery, stored whole before the 200."""

    __tablename__ = "alert_batches"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    received_at: Mapped[datetime]
    receiver: Mapped[str] = mapped_column(String(1024))
    status: Mapped[str] = mapped_column(String(16))
    group_key: Mapped[str] = mapped_column(Text)
    external_url: Mapped[str] = mapped_column(Text, default="")
    truncated_alerts: Mapped[int] = mapped_column(Integer, default=0)
    alert_count: Mapped[int] = mapped_column(Integer)
    repeat_count: Mapped[int] = mapped_column(Integer, default=0)


class AlertRow(Base):
    """One alert of a batch. `dedup_key` is set on the first delivery only, so repeats never start work."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_state_claim", "state", "claim_expires"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("alert_batches.id"), index=True)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    alertname: Mapped[str] = mapped_column(String(256), index=True)
    status: Mapped[str] = mapped_column(String(16))
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime | None]
    labels: Mapped[Json]
    annotations: Mapped[Json]
    generator_url: Mapped[str] = mapped_column(Text, default="")
    received_at: Mapped[datetime]
    dedup_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    repeat_of: Mapped[int | None] = mapped_column(IdType)
    # new -> done (processed) ; repeat (never processed)
    state: Mapped[str] = mapped_column(String(16), index=True)
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    claim_expires: Mapped[datetime | None]
    processed_at: Mapped[datetime | None]
    outcome: Mapped[str | None] = mapped_column(String(64))
    remediation_id: Mapped[str | None] = mapped_column(String(36), index=True)
    note: Mapped[str | None] = mapped_column(Text)


class Remediation(Base):
    """One run of one playbook against one target; its state follows engine/states.py."""

    __tablename__ = "remediations"
    __table_args__ = (Index("ix_remediations_runnable", "state", "next_run_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    updated_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    state: Mapped[str] = mapped_column(String(32), index=True)
    state_reason: Mapped[str | None] = mapped_column(Text)
    rule: Mapped[str] = mapped_column(String(256))
    playbook: Mapped[str] = mapped_column(String(256), index=True)
    definitions_version: Mapped[str] = mapped_column(String(64))
    target_kind: Mapped[str] = mapped_column(String(16))
    target_key: Mapped[str] = mapped_column(String(512), index=True)
    node: Mapped[str | None] = mapped_column(String(253), index=True)
    gpu_uuid: Mapped[str | None] = mapped_column(String(128))
    gpu_index: Mapped[str | None] = mapped_column(String(16))
    namespace: Mapped[str | None] = mapped_column(String(253))
    pod: Mapped[str | None] = mapped_column(String(253))
    alert_id: Mapped[int | None] = mapped_column(IdType)
    alert_fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    alertname: Mapped[str] = mapped_column(String(256))
    alert_labels: Mapped[Json]
    alert_annotations: Mapped[Json]
    alert_resolved: Mapped[bool] = mapped_column(Boolean, default=False)
    params: Mapped[Json]
    # Snapshot of the rule and playbook at start: a running remediation never changes definitions.
    plan: Mapped[Json]
    context: Mapped[Json]
    phase: Mapped[str] = mapped_column(String(16), default="forward")
    current_step: Mapped[int] = mapped_column(Integer, default=0)
    # Unique while active: one active remediation per (target, playbook).
    active_key: Mapped[str | None] = mapped_column(String(800), unique=True)
    quarantined: Mapped[bool] = mapped_column(Boolean, default=False)
    linked_alerts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires: Mapped[datetime | None]
    next_run_at: Mapped[datetime | None]
    approval_token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    approval_expires_at: Mapped[datetime | None]
    approval_step: Mapped[int | None] = mapped_column(Integer)
    decided_by: Mapped[str | None] = mapped_column(String(256))
    decided_at: Mapped[datetime | None]
    decision: Mapped[str | None] = mapped_column(String(16))


class StepRow(Base):
    """One step execution (forward or revert) with its rendered params, output and saved progress."""

    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("remediation_id", "phase", "idx", name="uq_steps_position"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    remediation_id: Mapped[str] = mapped_column(ForeignKey("remediations.id"), index=True)
    phase: Mapped[str] = mapped_column(String(16))
    idx: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(256))
    action: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    params: Mapped[Json]
    output: Mapped[Json]
    progress: Mapped[Json]
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class AuditEvent(Base):
    """Append-only, hash-chained record of everything the controller decided or did."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    ts: Mapped[datetime] = mapped_column(index=True)
    remediation_id: Mapped[str | None] = mapped_column(String(36), index=True)
    kind: Mapped[str] = mapped_column(String(64), index=True)
    actor: Mapped[str] = mapped_column(String(256))
    data: Mapped[Json]
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64), unique=True)


class ControllerState(Base):
    """Small key/value facts shared by replicas: the pause switch, replica heartbeats."""

    __tablename__ = "controller_state"

    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[Json]
    updated_at: Mapped[datetime]


class Approval(Base):
    """One request for a human decision on one step; the link's token is stored only as its SHA-256."""

    __tablename__ = "approvals"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    remediation_id: Mapped[str] = mapped_column(ForeignKey("remediations.id"), index=True)
    step_index: Mapped[int] = mapped_column(Integer)
    step_name: Mapped[str] = mapped_column(String(256))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    # Where the request went (notification channels, the approver allowlist), shown on the page.
    requested_to: Mapped[list[Any]]
    # None while open; approved | rejected | expired | superseded.
    decision: Mapped[str | None] = mapped_column(String(16))
    decided_by: Mapped[str | None] = mapped_column(String(256))
    decided_at: Mapped[datetime | None]
    # page | ui | api | slack | expiry
    decision_source: Mapped[str | None] = mapped_column(String(32))
