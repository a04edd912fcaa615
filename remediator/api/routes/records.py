"""Read-only listings of stored alerts and approval requests (bearer token, like the other API reads).

They back `remediator get alerts|approvals`; `POST /api/v1/alerts` (the webhook) stays in alerts.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from remediator.api.deps import Auth, RepoDep, RuntimeDep
from remediator.api.query_check import KnownQuery
from remediator.api.routes.remediations import remediation_ref
from remediator.api.schemas import AlertOut, ApprovalOut, alert_out, approval_out
from remediator.domain.silences import silence_id_of
from remediator.engine.approval_decisions import ApprovalStatus
from remediator.engine.unacted import silence_summary

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", dependencies=[Auth], tags=["records"])



@router.get("/alerts", response_model=list[AlertOut], dependencies=[KnownQuery])
async def list_alerts(
    rt: RuntimeDep,
    status: Annotated[Literal["firing", "resolved"] | None, Query(description="as Alertmanager sent it")] = None,
    state: Annotated[Literal["new", "done"] | None, Query(description="new: not processed yet")] = None,
    node: Annotated[
        str | None, Query(max_length=253, description="matches any label of REMEDIATOR_NODE_LABEL_PRECEDENCE")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[AlertOut]:
    """Stored alerts, newest first."""
    rows = await rt.repo.recent_alerts(
        state=state, status=status, node=node, node_labels=rt.settings.node_label_precedence, limit=limit
    )
    held = {r.id: sid for r in rows if r.outcome == "silenced" and (sid := silence_id_of(r.note)) is not None}
    silences = await rt.repo.silences_by_id(list(held.values()))
    return [
        alert_out(r, silence_summary(silences[held[r.id]]) if held.get(r.id) in silences else None) for r in rows
    ]


@router.get("/approvals", response_model=list[ApprovalOut], dependencies=[KnownQuery])
async def list_approvals(
    repo: RepoDep,
    status: Annotated[ApprovalStatus | None, Query(description="pending: not decided yet")] = None,
    node: Annotated[str | None, Query(max_length=253)] = None,
    remediation: Annotated[
        str | None, Query(max_length=64, description="a remediation ID or a prefix of exactly one")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[ApprovalOut]:
    """Approval requests, newest first, each with the remediation it gates (tokens are never shown). `status`
    is the word the UI shows too (engine/approval_decisions.py `approval_status`)."""
    rem_id = await remediation_ref(repo, remediation) if remediation is not None else None
    undecided = status in (None, "pending", "expired", "closed")
    rows = await repo.list_approvals(
        decision=None if undecided else status, pending=status in ("pending", "closed"), node=node,
        remediation_id=rem_id, limit=limit if status in (None, "approved", "rejected", "superseded") else 100000,
    )
    now = repo.clock()
    out = [approval_out(a, r, now) for a, r in rows]
    return [o for o in out if status is None or o.status == status][:limit]
