"""Response models of the JSON API (they make the OpenAPI schema honest) and their builders."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, JsonValue

from remediator.domain.plan_snapshot import plan_of
from remediator.domain.states import phase_of, shown_state
from remediator.domain.timestamps import as_utc
from remediator.engine.approval_decisions import approval_status, decision_of
from remediator.store.models import AlertRow, Approval, AuditEvent, Remediation, StepRow

__all__ = [
    "AlertOut", "ApprovalOut", "AuditOut", "RemediationDetail", "RemediationOut", "StepOut", "UtcDatetime",
    "alert_out", "approval_out", "as_utc", "audit_out", "detail_out", "summary_out",
]


# Every datetime of a response model: serialised as ISO 8601 with `+00:00` (a client must never have to guess
# the offset of a timestamp the API gives it; `as_utc` is domain/timestamps.py's, exported here for the routes).
UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


class RemediationOut(BaseModel):
    id: str
    state: str
    state_reason: str | None
    rule: str
    playbook: str
    target: str
    node: str | None
    gpu_uuid: str | None
    gpu_index: str | None
    namespace: str | None
    alertname: str
    created_at: UtcDatetime
    updated_at: UtcDatetime
    finished_at: UtcDatetime | None
    current_step: int
    # `revert` while the remediation undoes its steps and once it has (`reverting`, `reverted`), else
    # `forward`: derived from the state (domain/states.py: phase_of).
    phase: str
    linked_alerts: int
    definitions_version: str
    # Unexpected failures of the driver in a row (reset by progress) and the last one's error line.
    crashes: int = 0
    error: str | None = None


class StepOut(BaseModel):
    phase: str
    index: int
    name: str
    action: str
    status: str
    attempts: int
    params: dict[str, JsonValue]
    output: dict[str, JsonValue]
    error: str | None
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None


class RemediationDetail(RemediationOut):
    alert_labels: dict[str, str]
    alert_annotations: dict[str, str]
    alert_resolved: bool
    params: dict[str, JsonValue]
    context: dict[str, JsonValue]
    steps: list[StepOut]
    planned_steps: list[dict[str, JsonValue]]
    approval_expires_at: UtcDatetime | None
    decided_by: str | None
    decision: str | None
    # Definition set, rule and playbook versions the remediation runs with (see GET /api/v1/definitions/{v}).
    versions: dict[str, str | None] = {}
    # Set when this remediation is a rung of the escalation ladder: from, reason, rung, ladder,
    # recurrence_seconds, history, gate (see remediator/engine/ladder.py).
    escalation: dict[str, JsonValue] | None = None
    # A person's forced return to service (domain/returns.py): actor, reason, skip, at, from.
    return_request: dict[str, JsonValue] | None = None
    # What must happen before the target returns to service (engine/return_gate.py): per gate step its index,
    # name, action, kind (reboot, validation or null), says (in words) and status (its row's, once it ran).
    return_gate: list[dict[str, JsonValue]] = []


class AuditOut(BaseModel):
    id: int
    ts: UtcDatetime
    remediation_id: str | None
    kind: str
    actor: str
    data: dict[str, JsonValue]
    prev_hash: str
    hash: str


def summary_out(rem: Remediation) -> RemediationOut:
    return RemediationOut(
        id=rem.id, state=shown_state(rem.state, rem.state_reason), state_reason=rem.state_reason, rule=rem.rule,
        playbook=rem.playbook, target=rem.target_key, node=rem.node, gpu_uuid=rem.gpu_uuid, gpu_index=rem.gpu_index,
        namespace=rem.namespace, alertname=rem.alertname, created_at=rem.created_at, updated_at=rem.updated_at,
        finished_at=rem.finished_at, current_step=rem.current_step, phase=phase_of(rem.state),
        linked_alerts=rem.linked_alerts, definitions_version=rem.definitions_version,
        crashes=rem.crashes or 0, error=rem.error,
    )


def step_out(row: StepRow) -> StepOut:
    return StepOut(
        phase=row.phase, index=row.idx, name=row.name, action=row.action, status=row.status, attempts=row.attempts,
        params=row.params, output=row.output, error=row.error, started_at=row.started_at,
        finished_at=row.finished_at,
    )


def detail_out(
    rem: Remediation, steps: list[StepRow], approval: Approval | None,
    return_gate: list[dict[str, JsonValue]] | None = None,
) -> RemediationDetail:
    """`approval`: the remediation's newest approval request (`Repository.current_approval`), if any;
    `return_gate`: the gate in words (engine/return_gate.py: stored_gate)."""
    plan = plan_of(rem)
    playbook_steps = plan.playbook.steps if plan.playbook is not None else ()
    planned = [
        {"index": i, "name": s.name, "action": s.action, "approval": s.approval}
        for i, s in enumerate(playbook_steps)
    ]
    return RemediationDetail(
        **summary_out(rem).model_dump(),
        alert_labels=rem.alert_labels, alert_annotations=rem.alert_annotations, alert_resolved=rem.alert_resolved,
        params=rem.params, context=rem.context, steps=[step_out(s) for s in steps], planned_steps=planned,
        approval_expires_at=approval.expires_at if approval is not None else None,
        decided_by=approval.decided_by if approval is not None else None, decision=decision_of(rem, approval),
        versions=dict(plan.versions or {"definitions": rem.definitions_version}),
        escalation=plan.escalation_json, return_request=rem.return_request, return_gate=list(return_gate or []),
    )


def audit_out(event: AuditEvent) -> AuditOut:
    return AuditOut(
        id=event.id, ts=event.ts, remediation_id=event.remediation_id, kind=event.kind, actor=event.actor,
        data=event.data, prev_hash=event.prev_hash, hash=event.hash,
    )


class AlertOut(BaseModel):
    """One stored alert: what Alertmanager sent and what the controller made of it."""

    id: int
    alertname: str
    status: str  # firing | resolved (as Alertmanager said)
    state: str  # new (not processed yet) | done
    outcome: str | None
    note: str | None
    remediation_id: str | None
    fingerprint: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: UtcDatetime
    ends_at: UtcDatetime | None
    received_at: UtcDatetime
    processed_at: UtcDatetime | None
    repeat_of: int | None
    # outcome `silenced`: the silence that held it (id, createdBy, comment, endsAt)
    silence: dict[str, JsonValue] | None = None


class ApprovalOut(BaseModel):
    """One approval request (never its token) with the remediation it gates."""

    id: int
    remediation_id: str
    status: str  # pending | approved | rejected | expired | superseded
    step_index: int
    step_name: str
    created_at: UtcDatetime
    expires_at: UtcDatetime
    requested_to: list[str]
    decided_by: str | None
    decided_at: UtcDatetime | None
    decision_source: str | None
    remediation_state: str
    rule: str
    playbook: str
    target: str
    node: str | None
    gpu_uuid: str | None
    alertname: str


def alert_out(row: AlertRow, silence: dict[str, JsonValue] | None = None) -> AlertOut:
    return AlertOut(
        id=row.id, alertname=row.alertname, status=row.status, state=row.state, outcome=row.outcome, note=row.note,
        remediation_id=row.remediation_id, fingerprint=row.fingerprint, labels=row.labels,
        annotations=row.annotations, starts_at=row.starts_at, ends_at=row.ends_at, received_at=row.received_at,
        processed_at=row.processed_at, repeat_of=row.repeat_of, silence=silence,
    )


def approval_out(approval: Approval, rem: Remediation, now: datetime | None = None) -> ApprovalOut:
    """One request; `status` is approval_decisions.approval_status, the word the UI shows too."""
    status = approval_status(approval, rem, now or datetime.now(UTC))
    return ApprovalOut(
        id=approval.id, remediation_id=approval.remediation_id, status=status,
        step_index=approval.step_index, step_name=approval.step_name, created_at=approval.created_at,
        expires_at=approval.expires_at, requested_to=list(approval.requested_to), decided_by=approval.decided_by,
        decided_at=approval.decided_at, decision_source=approval.decision_source,
        remediation_state=shown_state(rem.state, rem.state_reason),
        rule=rem.rule, playbook=rem.playbook, target=rem.target_key, node=rem.node, gpu_uuid=rem.gpu_uuid,
        alertname=rem.alertname,
    )
