"""approval decisions stored once: on the approval request, no longer also on the remediation

A decision used to live both on `remediations` (approval_step, approval_expires_at, approval_token_hash,
decision, decided_by, decided_at) and on `approvals`, kept equal by two compare-and-sets. The request a
remediation waits for is now found by `approvals.remediation_id` (the newest), and the decision is read there.

Upgrade first copies what only the remediation knows: a remediation that waited for approval before the
`approvals` table existed (0002) gets a request built from its columns (the same token hash, so its link keeps
working); a newest request left undecided while its remediation recorded a decision gets that decision. An
expiry the playbook treated as consent (`on_expiry: continue`), recorded on the remediation as `approved` by
the controller, is an `expired` request, as the approval service records it. Downgrade puts the newest
request's fields back on each remediation.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07 09:00:00.000000
"""

from __future__ import annotations

import hashlib
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_WHEN = sa.DateTime(timezone=True)
# The remediation's copy of its approval request, as 0001 made it (all nullable).
_DROPPED: dict[str, sa.types.TypeEngine[Any]] = {
    "approval_token_hash": sa.String(length=64),
    "approval_expires_at": _WHEN,
    "approval_step": sa.Integer(),
    "decided_by": sa.String(length=256),
    "decided_at": _WHEN,
    "decision": sa.String(length=16),
}
# The name PostgreSQL gave 0001's unnamed unique constraint; downgrade restores it under that name.
_LINK_HASH_UNIQUE = "remediations_approval_token_hash_key"

_remediations = sa.table(
    "remediations",
    sa.column("id", sa.String(36)),
    sa.column("created_at", _WHEN),
    sa.column("updated_at", _WHEN),
    sa.column("plan", sa.JSON()),
    *(sa.column(name, kind) for name, kind in _DROPPED.items()),
)
_approvals = sa.table(
    "approvals",
    sa.column("id", _ID),
    sa.column("remediation_id", sa.String(36)),
    sa.column("step_index", sa.Integer()),
    sa.column("step_name", sa.String(256)),
    sa.column("token_hash", sa.String(64)),
    sa.column("created_at", _WHEN),
    sa.column("expires_at", _WHEN),
    sa.column("requested_to", sa.JSON()),
    sa.column("decision", sa.String(16)),
    sa.column("decided_by", sa.String(256)),
    sa.column("decided_at", _WHEN),
    sa.column("decision_source", sa.String(32)),
)


def _playbook(plan: Any) -> dict[str, Any]:
    """The playbook snapshot in a remediation's plan."""
    playbook = plan.get("playbook") if isinstance(plan, dict) else None
    return playbook if isinstance(playbook, dict) else {}


def _continues(plan: Any) -> bool:
    return str(_playbook(plan).get("on_expiry") or "abort") == "continue"


def _step_name(plan: Any, index: int) -> str:
    steps = _playbook(plan).get("steps") or []
    step = steps[index] if 0 <= index < len(steps) else None
    return str(step["name"]) if isinstance(step, dict) and step.get("name") else f"step {index}"


def _decision_of(rem: Any) -> dict[str, Any]:
    """The remediation's decision as the approval row records it."""
    if rem.decision is None:
        return {"decision": None, "decided_by": None, "decided_at": None, "decision_source": None}
    by_expiry = rem.decided_by == "controller" and rem.decision in ("approved", "expired")
    return {
        "decision": "expired" if by_expiry else rem.decision,
        "decided_by": rem.decided_by,
        "decided_at": rem.decided_at,
        "decision_source": "expiry" if by_expiry else None,
    }


def _newest_approvals(bind: sa.Connection) -> dict[str, Any]:
    newest = (
        sa.select(_approvals.c.remediation_id, sa.func.max(_approvals.c.id).label("id"))
        .group_by(_approvals.c.remediation_id)
        .subquery()
    )
    rows = bind.execute(sa.select(_approvals).join(newest, newest.c.id == _approvals.c.id)).all()
    return {row.remediation_id: row for row in rows}


def upgrade() -> None:
    bind = op.get_bind()
    newest = _newest_approvals(bind)
    waited = bind.execute(sa.select(_remediations).where(_remediations.c.approval_step.is_not(None))).all()
    for rem in waited:
        request = newest.get(rem.id)
        if request is None:
            token_hash = rem.approval_token_hash or hashlib.sha256(f"no link:{rem.id}".encode()).hexdigest()
            bind.execute(
                _approvals.insert().values(
                    remediation_id=rem.id, step_index=rem.approval_step,
                    step_name=_step_name(rem.plan, rem.approval_step), token_hash=token_hash,
                    created_at=rem.created_at, expires_at=rem.approval_expires_at or rem.updated_at,
                    requested_to=[], **_decision_of(rem),
                )
            )
        elif request.decision is None and rem.decision is not None and request.step_index == rem.approval_step:
            bind.execute(_approvals.update().where(_approvals.c.id == request.id).values(**_decision_of(rem)))
    with op.batch_alter_table("remediations", schema=None) as batch_op:
        for name in _DROPPED:
            batch_op.drop_column(name)


def downgrade() -> None:
    with op.batch_alter_table("remediations", schema=None) as batch_op:
        for name, kind in _DROPPED.items():
            batch_op.add_column(sa.Column(name, kind, nullable=True))
    bind = op.get_bind()
    plans = dict(bind.execute(sa.select(_remediations.c.id, _remediations.c.plan)).all())
    for rem_id, request in _newest_approvals(bind).items():
        decision = request.decision
        if decision == "expired" and request.decision_source == "expiry" and _continues(plans.get(rem_id)):
            decision = "approved"
        elif decision == "superseded":
            decision = None
        bind.execute(
            _remediations.update().where(_remediations.c.id == rem_id).values(
                approval_step=request.step_index, approval_expires_at=request.expires_at,
                approval_token_hash=request.token_hash, decision=decision,
                decided_by=request.decided_by if decision else None,
                decided_at=request.decided_at if decision else None,
            )
        )
    with op.batch_alter_table("remediations", schema=None) as batch_op:
        batch_op.create_unique_constraint(_LINK_HASH_UNIQUE, ["approval_token_hash"])
