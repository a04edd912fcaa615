"""GET /api/v1/audit: the audit log, oldest first, optionally for one remediation (its ID or a unique prefix),
for the remediations of one node, and within a time span (`since` inclusive, `until` exclusive)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from remediator.api.deps import Auth, RepoDep
from remediator.api.query_check import KnownQuery
from remediator.api.routes.remediations import remediation_ref
from remediator.api.schemas import AuditOut, as_utc, audit_out

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/audit", dependencies=[Auth], tags=["audit"])


@router.get("", response_model=list[AuditOut], dependencies=[KnownQuery])
async def list_audit(
    repo: RepoDep,
    remediation: Annotated[
        str | None, Query(max_length=64, description="a remediation ID or a prefix of exactly one")
    ] = None,
    node: Annotated[str | None, Query(max_length=253, description="events of remediations on this node")] = None,
    since: Annotated[
        datetime | None, Query(description="events at or after this time (ISO 8601; no offset means UTC)")
    ] = None,
    until: Annotated[datetime | None, Query(description="events before this time (ISO 8601)")] = None,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[AuditOut]:
    if since is not None and until is not None and as_utc(until) <= as_utc(since):
        raise HTTPException(422, "until: must be later than since")
    rem_id = await remediation_ref(repo, remediation) if remediation is not None else None
    events = await repo.list_audit(
        remediation_id=rem_id, node=node, after_id=after, limit=limit,
        since=as_utc(since) if since else None, until=as_utc(until) if until else None,
    )
    return [audit_out(e) for e in events]
