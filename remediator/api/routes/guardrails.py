"""The kill switch (pause/resume, audited) and guardrail status."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from remediator.api.deps import Auth, RuntimeDep, WorkerDep
from remediator.api.routes.remediations import MoveIn, ReasonIn, person_of
from remediator.engine.guardrail_status import guardrail_status
from remediator.store.flag_store import PAUSE_FLAG

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", dependencies=[Auth], tags=["guardrails"])


@router.post("/pause", responses={422: {}})
async def pause(body: ReasonIn, request: Request, rt: RuntimeDep) -> dict[str, Any]:
    """Kill switch: no new step starts anywhere until resumed. Who and why (required) are kept with it."""
    actor = person_of(request, body.by)
    await rt.repo.set_flag(
        PAUSE_FLAG, {"paused": True, "by": actor, "reason": body.reason}, audit_kind="controller.paused", actor=actor
    )
    rt.metrics.paused.set(1)
    return {"paused": True}


@router.post("/resume")
async def resume(request: Request, rt: RuntimeDep, worker: WorkerDep, body: MoveIn | None = None) -> dict[str, Any]:
    body = body or MoveIn()
    actor = person_of(request, body.by)
    await rt.repo.set_flag(
        PAUSE_FLAG, {"paused": False, "by": actor, "reason": body.reason}, audit_kind="controller.resumed",
        actor=actor,
    )
    rt.metrics.paused.set(0)
    await rt.repo.end_everything_pauses(actor=actor, reason=body.reason)  # a plain resume ends `all` pauses too
    await rt.repo.wake_held()
    if worker is not None:
        worker.wake()
    return {"paused": False}


@router.get("/guardrails")
async def guardrails(rt: RuntimeDep) -> dict[str, Any]:
    return await guardrail_status(rt)
