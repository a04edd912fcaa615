"""Silences served by the controller, in Alertmanager's v2 shapes: the JSON API and the `/silences` page.

`POST /api/v1/silences` takes `matchers`, `startsAt`, `endsAt`, `createdBy`, `comment` and answers
`{"silenceID": ...}`; `GET /api/v1/silences[/{id}]` shows each with its state now (pending, active, expired);
`DELETE /api/v1/silences/{id}` expires one (the record stays). The actor recorded in the audit log is who
authenticated (the API caller, or the person the trusted proxy names); `createdBy` is the author as stated,
and defaults to that actor.

The page lists the silences and creates and expires them through a confirmation that says what will
happen. Both actions need a signed-in person (also on a loopback UI that is otherwise open), the form's CSRF
token, and the confirmation; they are audited with that person.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Final

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, StrictBool
from starlette.datastructures import FormData

from remediator.api.deps import Auth, RuntimeDep
from remediator.api.routes.approvals import csrf_of, message_page
from remediator.api.routes.remediations import actor_of
from remediator.api.signin import SignedIn, require_sign_in
from remediator.api.templating import page
from remediator.domain.durations import format_duration, parse_duration
from remediator.domain.silences import (
    MAX_COMMENT,
    MAX_NAME,
    MAX_VALUE,
    SilenceMatcher,
    matcher_text,
    parse_matchers,
    state_of,
    validate_matchers,
)
from remediator.domain.timestamps import as_utc
from remediator.engine.runtime import Runtime
from remediator.errors import MatcherError
from remediator.store.models import Silence
from remediator.validation_errors import field_of

__all__ = ["SilenceIn", "router", "silence_out", "ui_router"]

router = APIRouter(prefix="/api/v1/silences", dependencies=[Auth], tags=["silences"])
ui_router = APIRouter(tags=["ui"], include_in_schema=False, dependencies=[Depends(require_sign_in)])

_PURPOSE: Final = "ui:silences"
MAX_DURATION: Final = timedelta(days=365)


class MatcherIn(BaseModel):
    """One matcher, as Alertmanager's v2 API takes it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_NAME)
    value: str = Field(max_length=MAX_VALUE)
    # Alertmanager's names (camelCase) on the wire.
    isRegex: StrictBool
    isEqual: StrictBool = True


class SilenceIn(BaseModel):
    """A new silence (Alertmanager's PostableSilence, without `id`: a silence is expired and created anew,
    never edited)."""

    model_config = ConfigDict(extra="forbid")

    matchers: list[MatcherIn] = Field(min_length=1, max_length=64)
    startsAt: AwareDatetime | None = None  # default now; a start in the past is now
    endsAt: AwareDatetime
    createdBy: str | None = Field(default=None, max_length=256)  # default: the authenticated actor
    comment: str = Field(max_length=MAX_COMMENT)


def _invalid(field: str, message: str, value: object = None) -> RequestValidationError:
    loc: list[str | int] = ["body"]
    for part in field.replace("]", "").replace("[", ".").split("."):
        loc.append(int(part) if part.isdigit() else part)
    return RequestValidationError([{"loc": tuple(loc), "msg": message, "type": "value_error", "input": value}])


def silence_out(silence: Silence, now: datetime) -> dict[str, JsonValue]:
    """Alertmanager's GettableSilence, with who created (`actor`) and expired it (`expiredBy`)."""
    starts, ends = as_utc(silence.starts_at), as_utc(silence.ends_at)
    return {
        "id": silence.id, "status": {"state": state_of(starts, ends, now)}, "matchers": list(silence.matchers),
        "startsAt": starts.isoformat(), "endsAt": ends.isoformat(), "createdBy": silence.created_by,
        "comment": silence.comment, "updatedAt": as_utc(silence.updated_at).isoformat(), "actor": silence.actor,
        "expiredBy": silence.expired_by,
    }


def checked(
    matchers: list[SilenceMatcher], starts_at: datetime | None, ends_at: datetime, comment: str, now: datetime,
) -> tuple[datetime, str]:
    """(start, comment) of a valid silence; RequestValidationError naming the field otherwise."""
    try:
        validate_matchers(matchers)
    except MatcherError as exc:
        raise _invalid(exc.field, exc.message) from None
    start = max(starts_at, now) if starts_at is not None else now  # as Alertmanager: a past start is now
    if ends_at <= now:
        raise _invalid("endsAt", "the end is in the past", ends_at.isoformat())
    if ends_at <= start:
        raise _invalid("endsAt", "the end must be after the start", ends_at.isoformat())
    if ends_at - start > MAX_DURATION:
        raise _invalid("endsAt", f"a silence lasts at most {MAX_DURATION.days} days", ends_at.isoformat())
    text = comment.strip()
    if not text:
        raise _invalid("comment", "a comment saying why is required")
    return start, text


async def _create(
    rt: Runtime, matchers: list[SilenceMatcher], starts_at: datetime | None, ends_at: datetime, created_by: str | None,
    comment: str, actor: str,
) -> Silence:
    now = rt.clock()
    start, text = checked(matchers, starts_at, ends_at, comment, now)
    author = (created_by or "").strip() or actor
    return await rt.repo.create_silence(
        matchers, starts_at=start, ends_at=ends_at, created_by=author, comment=text, actor=actor
    )


@router.post("", responses={422: {}})
async def create_silence(body: SilenceIn, request: Request, rt: RuntimeDep) -> dict[str, str]:
    """Create a silence; firing alerts it matches are recorded as silenced and start nothing until it ends."""
    matchers = [SilenceMatcher(m.name, m.value, m.isRegex, m.isEqual) for m in body.matchers]
    silence = await _create(rt, matchers, body.startsAt, body.endsAt, body.createdBy, body.comment, actor_of(request))
    return {"silenceID": silence.id}


@router.get("")
async def list_silences(
    rt: RuntimeDep,
    state: Annotated[str | None, Query(pattern="^(active|pending|expired)$", description="only this state")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
) -> list[dict[str, JsonValue]]:
    """Silences, newest first, each with its state now."""
    now = rt.clock()
    return [silence_out(s, now) for s in await rt.repo.list_silences(limit=limit)
            if state is None or state_of(as_utc(s.starts_at), as_utc(s.ends_at), now) == state]


@router.get("/{silence_id}", responses={404: {}})
async def get_silence(silence_id: str, rt: RuntimeDep) -> dict[str, JsonValue]:
    silence = await rt.repo.get_silence(silence_id)
    if silence is None:
        raise HTTPException(404, f"no silence {silence_id}")
    return silence_out(silence, rt.clock())


@router.delete("/{silence_id}", responses={404: {}})
async def expire_silence(
    silence_id: str, request: Request, rt: RuntimeDep,
    comment: Annotated[str | None, Query(max_length=MAX_COMMENT, description="why (audited)")] = None,
) -> dict[str, JsonValue]:
    """Expire a silence now (kept, with who expired it); alerts from now on are decided as usual."""
    silence = await rt.repo.expire_silence(silence_id, actor=actor_of(request), comment=(comment or "").strip() or None)
    if silence is None:
        raise HTTPException(404, f"no silence {silence_id}")
    return silence_out(silence, rt.clock())


# -- the page -----------------------------------------------------------------------------------------


def _form_context(request: Request, who: str | None) -> tuple[dict[str, object], str, bool]:
    csrf = csrf_of(request)
    nonce, fresh = csrf.nonce(request)
    return {"signed_in": who, "csrf": csrf.token(nonce, _PURPOSE)}, nonce, fresh


def _refused() -> Response:
    return message_page(
        "Sign in first", "Creating or expiring a silence is recorded under a signed-in person; nothing was "
        "changed. Sign in and try again.", 403, link="/login?next=/silences",
    )


@ui_router.get("/silences", response_class=HTMLResponse)
async def silences_page(request: Request, rt: RuntimeDep, who: SignedIn, done: str | None = None) -> Response:
    now = rt.clock()
    rows = []
    for silence in await rt.repo.list_silences(limit=500):
        row = silence_out(silence, now)
        row["matcher_text"] = [matcher_text(SilenceMatcher.of(m)) for m in silence.matchers]
        rows.append(row)
    context, nonce, fresh = _form_context(request, who)
    response = page("silences.html", {
        **context, "nav_here": "/silences", "refresh": 0, "silences": rows,
        "done": done if done in ("created", "expired") else None,
    })
    if fresh:
        csrf_of(request).set_cookie(response, nonce)
    return response


def _form_silence(form: FormData, now: datetime) -> tuple[list[SilenceMatcher], datetime, str, str]:
    """(matchers, end, comment, duration as typed) from the page's form; ValueError says what is wrong."""
    text = str(form.get("matchers") or "")
    matchers = parse_matchers(line for line in text.splitlines() if line.strip())
    typed = str(form.get("duration") or "1h").strip()
    duration = parse_duration(typed)
    if duration <= timedelta(0):
        raise ValueError(f"duration {typed!r}: longer than zero")
    if duration > MAX_DURATION:
        raise ValueError(f"duration {typed!r}: at most {MAX_DURATION.days} days")
    comment = str(form.get("comment") or "").strip()
    return matchers, now + duration, comment, typed


@ui_router.post("/silences", response_class=HTMLResponse)
async def silences_action(request: Request, rt: RuntimeDep, who: SignedIn) -> Response:
    """Create (`action=create`) or expire (`action=expire`, `silence`) a silence: the first POST shows what will
    happen, the one with `confirmed=yes` does it."""
    form = await request.form()
    if not csrf_of(request).valid(request, str(form.get("csrf") or ""), _PURPOSE):
        return message_page(
            "Form could not be verified", "The form did not carry a valid security token for this browser; "
            "nothing was changed. Reload the page and try again.", 403, link="/silences",
        )
    if who is None:  # also on a loopback UI that is otherwise open: a silence is recorded under a person
        return _refused()
    action = str(form.get("action") or "")
    confirmed = str(form.get("confirmed") or "") == "yes"
    if action == "create":
        return await _ui_create(request, rt, who, form, confirmed)
    if action == "expire":
        return await _ui_expire(request, rt, who, str(form.get("silence") or ""), confirmed)
    return message_page("Nothing to do", "Choose to create or to expire a silence.", 400, link="/silences")


async def _ui_create(request: Request, rt: Runtime, who: str, form: FormData, confirmed: bool) -> Response:
    now = rt.clock()
    try:
        matchers, ends_at, comment, typed = _form_silence(form, now)
        checked(matchers, now, ends_at, comment, now)
    except ValueError as exc:
        return message_page("Cannot create the silence", str(exc), 422, link="/silences")
    except RequestValidationError as exc:
        error = exc.errors()[0]
        field = field_of(error["loc"])
        return message_page("Cannot create the silence", f"{field}: {error['msg']}", 422, link="/silences")
    if not confirmed:
        context, nonce, fresh = _form_context(request, who)
        response = page("silence_confirm.html", {
            **context, "nav_here": "/silences", "refresh": 0, "action": "create",
            "matcher_text": [matcher_text(m) for m in matchers], "matchers_raw": ", ".join(map(matcher_text, matchers)),
            "duration": typed, "ends_at": ends_at, "comment": comment, "length": format_duration(ends_at - now),
        })
        if fresh:
            csrf_of(request).set_cookie(response, nonce)
        return response
    await _create(rt, matchers, now, ends_at, None, comment, who)
    return RedirectResponse("/silences?done=created", status_code=303)


async def _ui_expire(request: Request, rt: Runtime, who: str, silence_id: str, confirmed: bool) -> Response:
    silence = await rt.repo.get_silence(silence_id) if silence_id else None
    if silence is None:
        return message_page("Not found", f"There is no silence {silence_id}.", 404, link="/silences")
    now = rt.clock()
    shown = silence_out(silence, now)
    if state_of(as_utc(silence.starts_at), as_utc(silence.ends_at), now) == "expired":
        return message_page("Already expired", f"Silence {silence_id} has already ended.", 409, link="/silences")
    if not confirmed:
        context, nonce, fresh = _form_context(request, who)
        response = page("silence_confirm.html", {
            **context, "nav_here": "/silences", "refresh": 0, "action": "expire", "silence": shown,
            "matcher_text": [matcher_text(SilenceMatcher.of(m)) for m in silence.matchers],
        })
        if fresh:
            csrf_of(request).set_cookie(response, nonce)
        return response
    await rt.repo.expire_silence(silence_id, actor=who)
    return RedirectResponse("/silences?done=expired", status_code=303)
