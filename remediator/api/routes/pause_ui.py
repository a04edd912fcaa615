"""Pause and resume from the fleet page, as a signed-in person, through a confirmation.

The fleet page links here (templates/_fleet_pause_controls.html): `GET /fleet/pause` is the form for a new pause
(scope: everything, node names, a label selector, playbooks; an end as a duration or a time; a reason), and
`GET /fleet/pauses/{id}/resume` the confirmation of ending one (or the kill switch, id `kill-switch`). Both are
forms on pages that do not refresh themselves, so nothing typed is lost. `POST /fleet/pauses` answers the
confirmation of a new pause, saying exactly what will happen (engine/pause_control.py); only the POST carrying
`confirmed=yes` changes anything. Every POST needs a signed-in person (also on a loopback UI that is otherwise
open: the pause is recorded under that person), the page's CSRF token and, for a new pause, a reason. The
confirmed POSTs call the functions the API's handlers call, validated by the same model (`PauseIn`), and are
audited with that person as the actor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from remediator.api.deps import RuntimeDep, WorkerDep
from remediator.api.routes.approvals import csrf_of, message_page
from remediator.api.routes.pauses import PauseIn
from remediator.api.signin import SignedIn, require_sign_in
from remediator.api.templating import page
from remediator.engine import pause_control
from remediator.engine.pause_control import KILL_SWITCH
from remediator.engine.runtime import Runtime
from remediator.validation_errors import field_of

__all__ = ["router"]

router = APIRouter(tags=["ui"], include_in_schema=False, dependencies=[Depends(require_sign_in)])

_PURPOSE: Final = "ui:pauses"
_SPLIT = re.compile(r"[\s,]+")
_REFUSED = ("Pausing or resuming is recorded under a signed-in person; nothing was changed. Sign in and try "
            "again.")


def _token(request: Request) -> tuple[str, str, bool]:
    csrf = csrf_of(request)
    nonce, fresh = csrf.nonce(request)
    return csrf.token(nonce, _PURPOSE), nonce, fresh


def _answer(request: Request, template: str, context: Mapping[str, object]) -> Response:
    token, nonce, fresh = _token(request)
    response = page(template, {"nav_here": "/fleet", "refresh": 0, **context, "csrf": token})
    if fresh:
        csrf_of(request).set_cookie(response, nonce)
    return response


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value.strip() if isinstance(value, str) else ""


def _playbook_names(rt: Runtime) -> list[str]:
    return sorted(rt.definitions.current.playbooks)


@router.get("/fleet/pause", response_class=HTMLResponse)
async def pause_form(request: Request, rt: RuntimeDep, who: SignedIn) -> Response:
    """The form for a new pause (`?node=` or `?selector=` fill in the scope)."""
    node = (request.query_params.get("node") or "").strip()[:253]
    selector = (request.query_params.get("selector") or "").strip()[:1024]
    return _answer(request, "pause_form.html", {
        "signed_in": who, "playbooks": _playbook_names(rt), "node": node, "selector": selector,
        "some": bool(node or selector),
    })


def _pause_in(form: FormData, playbooks_known: list[str]) -> tuple[PauseIn, str | None]:
    """The form as the API's model (so the page accepts exactly what the API does), and the duration as typed;
    ValueError with a sentence saying what is wrong."""
    scope = _text(form, "scope")
    nodes = [n for n in _SPLIT.split(_text(form, "nodes")) if n]
    selector = _text(form, "selector") or None
    playbooks = [p for p in form.getlist("playbook") if isinstance(p, str) and p]
    unknown = [p for p in playbooks if p not in playbooks_known]
    if unknown:
        raise ValueError(f"playbook: {', '.join(unknown)} is not a loaded playbook")
    if scope == "all":
        if nodes or selector or playbooks:
            raise ValueError("scope: 'everything' was chosen, but nodes, a selector or playbooks were named too; "
                             "choose 'only' to pause just those")
    elif scope == "some":
        if not (nodes or selector or playbooks):
            raise ValueError("scope: name the nodes, a label selector or playbooks to pause, or choose everything")
    else:
        raise ValueError("scope: choose everything, or only some nodes or playbooks")
    length = _text(form, "for") or None
    until = _text(form, "until") or None
    if until is not None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?", until):
        until += "+00:00"  # the form's local date-time is UTC, as its label says
    body: dict[str, object] = {"reason": _text(form, "reason"), "nodes": nodes, "selector": selector,
                            "playbooks": playbooks, "for": length, "until": until}
    try:
        return PauseIn.model_validate(body), length
    except ValidationError as exc:
        error = exc.errors()[0]
        where = field_of(("body", *error["loc"])) if error["loc"] else "pause"
        raise ValueError(f"{where}: {str(error['msg']).removeprefix('Value error, ')}") from None


@router.post("/fleet/pauses", response_class=HTMLResponse)
async def create(request: Request, rt: RuntimeDep, worker: WorkerDep, who: SignedIn) -> Response:
    """A new pause: the first POST answers the confirmation (nothing is done), the one with `confirmed=yes`
    creates it as `who`."""
    form = await request.form()
    if not csrf_of(request).valid(request, _text(form, "csrf"), _PURPOSE):
        return message_page("Form could not be verified", "The form did not carry a valid security token for this "
                            "browser; nothing was changed. Reload the page and try again.", 403, link="/fleet/pause")
    if who is None:
        return message_page("Sign in first", _REFUSED, 403, link="/login?next=/fleet/pause")
    try:
        body, length = _pause_in(form, _playbook_names(rt))
    except ValueError as exc:
        return message_page("Cannot pause", f"{exc}. Nothing was changed.", 422, link="/fleet/pause")
    now = rt.clock()
    ends = body.ends_at(now)
    if ends is not None and ends <= now:
        return message_page("Cannot pause", "until: must be in the future. Nothing was changed.", 422,
                            link="/fleet/pause")
    if _text(form, "confirmed") != "yes":
        said = await pause_control.describe_new_pause(
            rt, nodes=body.nodes, selector=body.selector, playbooks=body.playbooks, ends_at=ends, length=length,
            reason=body.reason, actor=who,
        )
        return _answer(request, "pause_confirm.html", {
            "signed_in": who, "action": "create", "said": said, "form": {
                "scope": _text(form, "scope"), "nodes": " ".join(body.nodes), "selector": body.selector or "",
                "playbooks": body.playbooks, "for": length or "",
                "until": body.until.isoformat() if body.until is not None else "", "reason": body.reason,
            },
        })
    await pause_control.start_pause(rt, actor=who, reason=body.reason, nodes=body.nodes, selector=body.selector,
                                    playbooks=body.playbooks, ends_at=ends)
    return RedirectResponse("/fleet", status_code=303)


@router.get("/fleet/pauses/{pause_id}/resume", response_class=HTMLResponse)
async def resume_confirm(pause_id: str, request: Request, rt: RuntimeDep, who: SignedIn) -> Response:
    """The confirmation of ending a pause (or the kill switch): what will happen; nothing is done here."""
    if who is None:
        return message_page("Sign in first", _REFUSED, 403, link=f"/login?next=/fleet/pauses/{pause_id}/resume")
    said = await pause_control.describe_resume(rt, pause_id, actor=who)
    if said is None:
        return message_page("Not paused", f"No pause {pause_id} holds now; nothing to resume.", 404, link="/fleet")
    return _answer(request, "pause_confirm.html", {
        "signed_in": who, "action": "resume", "said": said, "pause_id": pause_id,
    })


@router.post("/fleet/pauses/{pause_id}/resume", response_class=HTMLResponse)
async def resume(pause_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep, who: SignedIn) -> Response:
    """End a pause (or lift the kill switch) as `who`; only with the confirmation's `confirmed=yes`."""
    form = await request.form()
    back = f"/fleet/pauses/{pause_id}/resume"
    if not csrf_of(request).valid(request, _text(form, "csrf"), _PURPOSE):
        return message_page("Form could not be verified", "The form did not carry a valid security token for this "
                            "browser; nothing was changed. Reload the page and try again.", 403, link=back)
    if who is None:
        return message_page("Sign in first", _REFUSED, 403, link=f"/login?next={back}")
    if _text(form, "confirmed") != "yes":
        return RedirectResponse(back, status_code=303)  # the confirmation first
    reason = _text(form, "reason")
    if len(reason) > 500 or not reason.replace("\n", " ").replace("\r", " ").isprintable():
        return message_page("Reason not accepted", "A reason is at most 500 printable characters.", 422, link=back)
    if pause_id == KILL_SWITCH:
        if await pause_control.describe_resume(rt, KILL_SWITCH, actor=who) is None:
            return message_page("Not paused", "The kill switch is not set; nothing was changed.", 409, link="/fleet")
        await pause_control.lift_kill_switch(rt, actor=who, reason=reason or None)
    else:
        active = {p.id for p in await rt.repo.active_pauses()}
        if pause_id not in active:
            return message_page("Not paused", f"No pause {pause_id} holds now (it ended or never was); nothing was "
                                "changed.", 409, link="/fleet")
        await pause_control.end_pause(rt, pause_id, actor=who, reason=reason or None)
    if worker is not None:
        worker.wake()
    return RedirectResponse("/fleet", status_code=303)

