"""Scoped, timed pauses (domain/pauses.py): `POST /api/v1/pauses`, `GET /api/v1/pauses`, `DELETE
/api/v1/pauses/{id}` (or `POST /api/v1/pauses/{id}/resume`, for clients without DELETE). The kill switch
(`/api/v1/pause`, `/api/v1/resume`) stays as it was; a plain resume also ends the pauses whose scope is
everything."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException, Request
from pydantic import Field, JsonValue, field_validator, model_validator

from remediator.api.deps import Auth, RuntimeDep, WorkerDep
from remediator.api.routes.remediations import MoveIn, ReasonIn, person_of
from remediator.domain.durations import parse_duration
from remediator.domain.pauses import parse_selector
from remediator.engine import pause_control
from remediator.errors import SelectorError

__all__ = ["PauseIn", "router"]

router = APIRouter(prefix="/api/v1", dependencies=[Auth], tags=["guardrails"])
_MAX_FOR_S = 30 * 86400


class PauseIn(ReasonIn):
    """A pause: who and why (required), its scope (nothing named: everything), and an optional end (`for` a
    duration such as `2h`, or `until` a time with its UTC offset)."""

    nodes: list[str] = Field(default_factory=list, max_length=1000)
    selector: str | None = Field(default=None, max_length=1024, description="equality-based label selector")
    playbooks: list[str] = Field(default_factory=list, max_length=200)
    for_: str | None = Field(default=None, alias="for", max_length=32, description="e.g. 30m, 2h")
    until: datetime | None = None

    model_config = {"extra": "forbid", "populate_by_name": True}

    @field_validator("nodes", "playbooks")
    @classmethod
    def _names(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value or len(value) > 253 or any(c.isspace() or not c.isprintable() for c in value):
                raise ValueError(f"invalid name {value!r}")
        return sorted(set(values))

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        try:
            parse_selector(value)
        except SelectorError as exc:
            raise ValueError(str(exc)) from None
        return value.strip()

    @field_validator("until")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("until needs a UTC offset (e.g. 2026-12-05T18:00:00Z)")
        return value

    @model_validator(mode="after")
    def _one_end(self) -> PauseIn:
        if self.for_ is not None and self.until is not None:
            raise ValueError("give `for` or `until`, not both")
        if self.for_ is not None:
            try:
                seconds = parse_duration(self.for_).total_seconds()
            except (ValueError, TypeError) as exc:
                raise ValueError(f"for: {exc}") from None
            if not 0 < seconds <= _MAX_FOR_S:
                raise ValueError("for: between 1s and 30d")
        return self

    def ends_at(self, now: datetime) -> datetime | None:
        if self.for_ is not None:
            return now + parse_duration(self.for_)
        return self.until


@router.post("/pauses", status_code=201, responses={422: {}})
async def create_pause(body: PauseIn, request: Request, rt: RuntimeDep) -> dict[str, JsonValue]:
    """Pause a scope: no new step starts for the remediations in it until it ends or is resumed."""
    actor = person_of(request, body.by)
    now = datetime.now(UTC)
    ends = body.ends_at(now)
    if ends is not None and ends <= now:
        raise HTTPException(422, "until: must be in the future")
    return await pause_control.start_pause(rt, actor=actor, reason=body.reason, nodes=body.nodes,
                                           selector=body.selector, playbooks=body.playbooks, ends_at=ends)


@router.get("/pauses")
async def list_pauses(rt: RuntimeDep, all: bool = False) -> list[dict[str, JsonValue]]:
    """The pauses holding now (`?all=true`: every one, ended ones too), newest first."""
    return await rt.repo.list_pauses(include_ended=all)


@router.post("/pauses/{pause_id}/resume", responses={404: {}})
@router.delete("/pauses/{pause_id}", responses={404: {}})
async def end_pause(pause_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep,
                    body: MoveIn | None = None) -> dict[str, JsonValue]:
    """Resume one pause now (audited with who and why)."""
    body = body or MoveIn()
    ended = await pause_control.end_pause(rt, pause_id, actor=person_of(request, body.by), reason=body.reason)
    if ended is None:
        raise HTTPException(404, f"no pause {pause_id}")
    if worker is not None:
        worker.wake()
    return ended
