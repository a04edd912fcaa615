"""The kill switch (pause/resume, audited) and guardrail status."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import JsonValue

from remediator.api.deps import Auth, RuntimeDep, WorkerDep
from remediator.api.routes.remediations import MoveIn, ReasonIn, person_of
from remediator.engine import pause_control
from remediator.engine.guardrail_status import guardrail_status

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", dependencies=[Auth], tags=["guardrails"])


@router.post("/pause", responses={422: {}})
async def pause(body: ReasonIn, request: Request, rt: RuntimeDep) -> dict[str, bool]:
    """Kill switch: no new step starts anywhere until resumed. Who and why (required) are kept with it."""
    actor = person_of(request, body.by)
    await pause_control.pause_everything(rt, actor=actor, reason=body.reason)
    return {"paused": True}


@router.post("/resume")
async def resume(request: Request, rt: RuntimeDep, worker: WorkerDep, body: MoveIn | None = None) -> dict[str, bool]:
    body = body or MoveIn()
    actor = person_of(request, body.by)
    await pause_control.lift_kill_switch(rt, actor=actor, reason=body.reason)  # also ends the `all` pauses
    if worker is not None:
        worker.wake()
    return {"paused": False}


@router.get("/guardrails")
async def guardrails(rt: RuntimeDep) -> dict[str, JsonValue]:
    return await guardrail_status(rt)
