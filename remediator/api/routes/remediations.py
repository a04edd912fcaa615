"""The remediation API: list, inspect, cancel, revert, release and return to service (bearer token when tokens
are configured). Every move names its actor (the trusted approver header, else `by` in the body, else `api`)
and a reason (required to cancel and to return); engine/overrides.py records and announces it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field, JsonValue, field_validator

from remediator.api.deps import Auth, RepoDep, RuntimeDep, WorkerDep
from remediator.api.incident import build_record
from remediator.api.query_check import KnownQuery
from remediator.api.schemas import RemediationDetail, RemediationOut, detail_out, summary_out
from remediator.api.signin import sign_in_of
from remediator.domain.returns import Skip
from remediator.domain.states import STATES
from remediator.engine import overrides
from remediator.engine.return_gate import stored_gate
from remediator.store.incident_archive import archive_name, pack
from remediator.store.models import Remediation
from remediator.store.repository import LARGE_COLUMNS, Repository

__all__ = ["MoveIn", "ReasonIn", "ReturnIn", "actor_of", "person_of", "remediation_ref", "router"]

router = APIRouter(prefix="/api/v1/remediations", dependencies=[Auth], tags=["remediations"])


def actor_of(request: Request) -> str:
    """Who called: the approver header when configured and sent by a trusted proxy, else 'api'."""
    who = sign_in_of(request).header_identity(request)
    return f"api:{who}" if who else "api"


class MoveIn(BaseModel):
    """The body of a person's move: who (when no trusted proxy header names them) and why."""

    model_config = {"extra": "forbid"}

    by: str | None = Field(default=None, max_length=100, description="who asks (the CLI's --by)")
    reason: str | None = Field(default=None, max_length=500, description="why; kept with the move")

    @field_validator("by", "reason")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        value = (value or "").strip()
        if value and not value.replace("\n", " ").isprintable():
            raise ValueError("printable characters only")
        return value or None


class ReasonIn(MoveIn):
    """A move that must say why (cancel)."""

    reason: str = Field(min_length=1, max_length=500, description="why; required")

    @field_validator("reason")
    @classmethod
    def _given(cls, value: str | None) -> str:
        if not value or not value.strip():  # blank: what `_printable` left of it is None
            raise ValueError("a reason is required")
        return value.strip()


class ReturnIn(ReasonIn):
    """A forced return to service: why, and which gate steps to skip."""

    skip: list[Skip] = Field(default_factory=list, max_length=2, description="reboot and/or validation")


def person_of(request: Request, by: str | None) -> str:
    """Who asks: the trusted approver header's person, else the name given as `by`, else 'api'."""
    actor = actor_of(request)
    return f"api:{by}" if actor == "api" and by else actor


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
async def get_remediation(rem_id: str, rt: RuntimeDep) -> RemediationDetail:
    repo = rt.repo
    rem = await repo.get(rem_id)
    if rem is None:
        raise HTTPException(404, f"no remediation {rem_id}")
    rows = await repo.steps(rem_id)
    gate = [g.as_dict() for g in stored_gate(rt.actions, rem, rows)]
    return detail_out(rem, rows, await repo.current_approval(rem_id), gate)


@router.get("/{rem_id}/record", responses={404: {}})
async def get_record(rem_id: str, rt: RuntimeDep) -> dict[str, JsonValue]:
    """The whole incident record of one remediation (what `remediator describe -o json` prints): the
    remediation with every step, its timeline, its audit rows and the chain segment that verifies them, its
    approval requests, the stored alert payloads, the node and pods as recorded (and the node now, when the
    controller has a cluster), the agent's readings and the definitions version. Nothing is cut."""
    rem = await rt.repo.get(rem_id)
    if rem is None:
        raise HTTPException(404, f"no remediation {rem_id}")
    return await build_record(rt, rem)


@router.get(
    "/{rem_id}/bundle", response_class=Response, responses={
        200: {"content": {"application/gzip": {}}, "description": "the incident record as a tar.gz archive"},
        404: {},
    },
)
async def get_bundle(rem_id: str, rt: RuntimeDep) -> Response:
    """The incident record packed for a postmortem: one tar.gz with a README and a manifest (SHA-256 of every
    file) that say how to verify the audit segment (`remediator bundle ID` writes the same archive)."""
    rem = await rt.repo.get(rem_id)
    if rem is None:
        raise HTTPException(404, f"no remediation {rem_id}")
    body = pack(await build_record(rt, rem))
    return Response(body, media_type="application/gzip", headers={
        "Content-Disposition": f'attachment; filename="{archive_name(rem.id)}"',
    })


@router.post("/{rem_id}/cancel", response_model=RemediationOut, responses={404: {}, 409: {}, 422: {}})
async def cancel(rem_id: str, body: ReasonIn, request: Request, rt: RuntimeDep, worker: WorkerDep) -> RemediationOut:
    """Stop an open remediation where it is (nothing is undone); a reason is required. Its open approval
    requests are superseded."""
    await _exists(rt.repo, rem_id)
    rem = await overrides.cancel(rt, rem_id, actor=person_of(request, body.by), reason=body.reason)
    return _woken(rem, worker)


@router.post("/{rem_id}/revert", response_model=RemediationOut, responses={404: {}, 409: {}})
async def revert(
    rem_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep, body: MoveIn | None = None
) -> RemediationOut:
    """Undo what a finished remediation did (its return gate first). 409 naming the state, and pointing at
    `return` where that is allowed instead."""
    await _exists(rt.repo, rem_id)
    body = body or MoveIn()
    rem = await overrides.revert(rt, rem_id, actor=person_of(request, body.by), reason=body.reason)
    return _woken(rem, worker)


@router.post("/{rem_id}/release", response_model=RemediationOut, responses={404: {}, 409: {}})
async def release(
    rem_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep, body: MoveIn | None = None
) -> RemediationOut:
    """A human lets a held remediation past the flapping and repeat-offender holds (not the breaker): the
    `release` event moves it back to `pending`, and its admission honours the override."""
    await _exists(rt.repo, rem_id)
    body = body or MoveIn()
    rem = await overrides.release(rt, rem_id, actor=person_of(request, body.by), reason=body.reason)
    return _woken(rem, worker)


@router.post("/{rem_id}/return", response_model=RemediationOut, responses={404: {}, 409: {}, 422: {}})
async def return_to_service(
    rem_id: str, body: ReturnIn, request: Request, rt: RuntimeDep, worker: WorkerDep
) -> RemediationOut:
    """Forced return to service: stop what remains and undo what holds the node or GPU (untaint, uncordon,
    the project's labels and condition, the power limit), skipping the reboot wait and/or the validation gate
    when asked; ends `returned`. 409 naming the state when the remediation holds nothing."""
    await _exists(rt.repo, rem_id)
    rem = await overrides.return_to_service(
        rt, rem_id, actor=person_of(request, body.by), reason=body.reason, skip=body.skip
    )
    return _woken(rem, worker)


async def _exists(repo: Repository, rem_id: str) -> None:
    if await repo.get(rem_id) is None:
        raise HTTPException(404, f"no remediation {rem_id}")


def _woken(rem: Remediation, worker: WorkerDep) -> RemediationOut:
    if worker is not None:
        worker.wake()
    return summary_out(rem)
