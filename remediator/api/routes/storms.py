"""Shared-cause storms (engine/storm_guard.py): `GET /api/v1/storms`, `GET /api/v1/storms/{id}`, and the one group
decision, `POST /api/v1/storms/{id}/approve` (every remediation it holds goes on) and `.../reject` (reason
required; every one it holds is cancelled)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from pydantic import JsonValue

from remediator.api.deps import Auth, RuntimeDep, WorkerDep
from remediator.api.routes.remediations import MoveIn, ReasonIn, person_of
from remediator.engine.runtime import Runtime
from remediator.engine.storm_control import StormDecided, decide_storm
from remediator.engine.worker import Wakes
from remediator.store.storm_records import StormRecord

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", dependencies=[Auth], tags=["guardrails"])


@router.get("/storms", response_model=list[dict[str, JsonValue]])
async def list_storms(rt: RuntimeDep, all: bool = True) -> list[StormRecord]:
    """Storms, newest first (`?all=false`: only those not closed)."""
    return await rt.repo.list_storms(include_closed=all)


@router.get("/storms/{storm_id}", response_model=dict[str, JsonValue], responses={404: {}})
async def get_storm(storm_id: str, rt: RuntimeDep) -> StormRecord:
    """One storm: cause, candidates with their counts, nodes, timeline and decision, and what it holds now."""
    storm = await rt.repo.get_storm(storm_id)
    if storm is None:
        raise HTTPException(404, f"no storm {storm_id}")
    return storm


async def _decide(storm_id: str, decision: str, request: Request, rt: Runtime, worker: Wakes | None, body: MoveIn
                  ) -> StormDecided:
    record = await decide_storm(rt, storm_id, decision, actor=person_of(request, body.by), reason=body.reason)
    if record is None:
        raise HTTPException(404, f"no storm {storm_id}")
    if record["state"] != decision:
        raise HTTPException(409, f"storm {storm_id} is {record['state']}: "
                                 f"{'decided by ' + str(record['decided_by']) if record['decided_by'] else 'closed'}")
    if worker is not None:
        worker.wake()
    return record


@router.post("/storms/{storm_id}/approve", response_model=dict[str, JsonValue], responses={404: {}, 409: {}})
async def approve_storm(storm_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep,
                        body: MoveIn | None = None) -> StormDecided:
    """Approve the group: every remediation the storm holds goes on, and later ones on its nodes are not held."""
    return await _decide(storm_id, "approved", request, rt, worker, body or MoveIn())


@router.post("/storms/{storm_id}/reject", response_model=dict[str, JsonValue], responses={404: {}, 409: {}, 422: {}})
async def reject_storm(storm_id: str, body: ReasonIn, request: Request, rt: RuntimeDep,
                       worker: WorkerDep) -> StormDecided:
    """Reject the group: every remediation the storm holds is cancelled (a reason is required)."""
    return await _decide(storm_id, "rejected", request, rt, worker, body)
