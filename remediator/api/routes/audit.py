"""GET /api/v1/audit: the audit log, oldest first, optionally for one remediation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from remediator.api.deps import Auth, RepoDep
from remediator.api.schemas import AuditOut, audit_out

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/audit", dependencies=[Auth], tags=["audit"])


@router.get("", response_model=list[AuditOut])
async def list_audit(
    repo: RepoDep,
    remediation: Annotated[str | None, Query(max_length=64)] = None,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[AuditOut]:
    return [audit_out(e) for e in await repo.list_audit(remediation_id=remediation, after_id=after, limit=limit)]
