"""The remediation API: list, inspect, cancel and revert (bearer token when tokens are configured)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request

from remediator.api.deps import Auth, RepoDep, RuntimeDep, WorkerDep
from remediator.api.query_check import KnownQuery
from remediator.api.schemas import RemediationDetail, RemediationOut, detail_out, summary_out
from remediator.api.signin import sign_in_of
from remediator.engine.moves import move
from remediator.engine.states import STATES, Event, allowed_actions
from remediator.errors import IllegalTransition
from remediator.store.flag_store import OVERRIDE_FLAG_PREFIX
from remediator.store.repository import LARGE_COLUMNS, Repository

__all__ = ["actor_of", "remediation_ref", "router"]

router = APIRouter(prefix="/api/v1/remediations", dependencies=[Auth], tags=["remediations"])


def actor_of(request: Request) -> str:
    """Who called: the approver header when configured and sent by a trusted proxy, else 'api'."""
    who = sign_in_of(request).header_identity(request)
    return f"api:{who}" if who else "api"


async def remediation_ref(repo: Repository, ref: str) -> str:
    """The remediation `ref` names: its ID or a prefix of exactly one ID (422 naming the candidates when a
    prefix fits several, 422 when it fits none)."""
    ref = ref.strip().lower()
    if not ref or any(c not in "0123456789abcdef-" for c in ref):
        raise HTTPException(422, f"remediation: {ref!r} is not a remediation ID or a prefix of one")
    if await repo.get(ref) is not None:
        return ref
    matches = [r.id for r in await repo.list_remediations(id_prefix=ref, limit=11, leave_out=LARGE_COLUMNS)]
    if not matches:
        raise HTTPException(422, f"remediation: no remediation ID starts with {ref!r}")
    if len(matches) > 1:
        shown = ", ".join(matches[:10]) + (", ..." if len(matches) > 10 else "")
        raise HTTPException(422, f"remediation: {ref!r} fits several remediations ({shown}); give more of the ID")
    return matches[0]


@router.get("", response_model=list[RemediationOut], dependencies=[KnownQuery])
async def list_remediations(
    repo: RepoDep,
    state: Annotated[str | None, Query(description="filter by state")] = None,
    node: Annotated[str | None, Query(max_length=253)] = None,
    gpu: Annotated[str | None, Query(max_length=128, description="remediations of this GPU UUID")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    id_prefix: Annotated[
        str | None, Query(max_length=36, pattern=r"^[0-9a-fA-F-]+$", description="IDs starting with this")
    ] = None,
) -> list[RemediationOut]:
    if state is not None and state not in STATES:
        raise HTTPException(422, f"unknown state {state!r}; one of {', '.join(STATES)}")
    rows = await repo.list_remediations(
        state=state, node=node, limit=limit, offset=offset, id_prefix=id_prefix.lower() if id_prefix else None,
        leave_out=LARGE_COLUMNS, gpu=gpu,
    )
    return [summary_out(r) for r in rows]


@router.get("/{rem_id}", response_model=RemediationDetail, responses={404: {}})
async def get_remediation(rem_id: str, repo: RepoDep) -> RemediationDetail:
    rem = await repo.get(rem_id)
    if rem is None:
        raise HTTPException(404, f"no remediation {rem_id}")
    return detail_out(rem, await repo.steps(rem_id), await repo.current_approval(rem_id))


@router.post("/{rem_id}/cancel", response_model=RemediationOut, responses={404: {}, 409: {}})
async def cancel(rem_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep) -> RemediationOut:
    return await _move(rem_id, Event.CANCEL, "cancelled through the API", request, rt, worker)


@router.post("/{rem_id}/revert", response_model=RemediationOut, responses={404: {}, 409: {}})
async def revert(rem_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep) -> RemediationOut:
    return await _move(rem_id, Event.REVERT, "revert requested through the API", request, rt, worker)


@router.post("/{rem_id}/release", response_model=RemediationOut, responses={404: {}, 409: {}})
async def release(rem_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep) -> RemediationOut:
    """A human lets a held remediation past the flapping and repeat-offender holds (not the breaker): the
    `release` event moves it back to `pending`, and its admission honours the override."""
    rem = await rt.repo.get(rem_id)
    if rem is None:
        raise HTTPException(404, f"no remediation {rem_id}")
    if rem.state != "held":
        raise IllegalTransition(rem.state, Event.RELEASE, allowed_actions(rem.state))
    actor = actor_of(request)
    await rt.repo.set_flag(
        f"{OVERRIDE_FLAG_PREFIX}{rem_id}", {"by": actor}, audit_kind="guardrail.override", actor=actor
    )
    return await _move(rem_id, Event.RELEASE, f"released by {actor}", request, rt, worker)


async def _move(
    rem_id: str, event: Event, reason: str, request: Request, rt: RuntimeDep, worker: WorkerDep
) -> RemediationOut:
    if await rt.repo.get(rem_id) is None:
        raise HTTPException(404, f"no remediation {rem_id}")
    try:
        rem = await move(rt, rem_id, event, reason=reason, actor=actor_of(request))
    except IllegalTransition as exc:
        raise HTTPException(409, str(exc)) from exc
    if worker is not None:
        worker.wake()
    return summary_out(rem)
