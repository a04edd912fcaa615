"""Storm pages: the list (`/storms`), one storm (`/storms/{id}`) and its approve-group link.

`/storms/{id}` shows what the storm analysis found (engine/storm_guard.py): the suspected cause, every candidate
with its counts, corrected p-value and lift, the faulting nodes, the remediations it holds now, the timeline as
the audit log's `storm.*` events have it, and the decision. While the storm is open a signed-in person may
approve or reject the group: the form POSTs to `/storms/{id}/decision`, which first answers a confirmation saying
what will happen ("Release 7 held remediations on nodes running driver 580.95.05"); only the POST carrying
`confirmed=yes`, from a signed-in person (also on a loopback UI that is otherwise open), with the page's CSRF
token, decides, through engine/storm_control.py as the API does, audited with that person as the actor.

`/storms/{id}/approval/{token}` is the link sent in the storm's Slack message (engine/storm_notices.py): like an
approval link, the token stands in for a sign-in to see and decide this one storm (the decider is the signed-in
person, else the typed name; the trusted proxy header when configured; the approver allowlist applies). GET never
changes anything (link unfurlers fetch it); the POST is CSRF-checked and decides once: a second decision, by
link, page or API, is told who decided first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from remediator.api.deps import RuntimeDep, WorkerDep
from remediator.api.routes.approvals import csrf_of, header_identity, identity_of, message_page
from remediator.api.signin import SignedIn, require_sign_in
from remediator.api.templating import page
from remediator.domain.storms import StormState, nodes_phrase
from remediator.engine.approvals import Approvals, hash_token
from remediator.engine.runtime import Runtime
from remediator.engine.storm_control import DECISIONS, decide_storm, describe_decision
from remediator.engine.worker import Wakes
from remediator.store.storm_records import StormRecord

__all__ = ["link_router", "router", "storm_overview"]

router = APIRouter(tags=["ui"], include_in_schema=False, dependencies=[Depends(require_sign_in)])
link_router = APIRouter(tags=["approvals"], include_in_schema=False)

_REFUSED: Final = ("A storm's group decision is recorded under a signed-in person; nothing was decided. Sign in "
                   "and try again.")
_DONE: Final = {
    "approved": "Approved: the remediations it held go on.",
    "rejected": "Rejected: the remediations it held were cancelled.",
}


def _ui_purpose(storm_id: str) -> str:
    return f"ui:storm:{storm_id}"


def _link_purpose(token: str) -> str:
    return f"storm-link:{hash_token(token)}"


def _reason(form: FormData) -> tuple[str | None, str | None]:
    """(the reason, None) or (None, why it is not accepted)."""
    value = form.get("reason")
    reason = value.strip() if isinstance(value, str) else ""
    if len(reason) > 500 or not reason.replace("\n", " ").replace("\r", " ").isprintable():
        return None, "A reason is at most 500 printable characters."
    return reason, None


async def storm_overview(rt: Runtime) -> list[dict[str, object]]:
    """The storms not closed, with what each holds now (the fleet page's include)."""
    storms = await rt.repo.list_storms(include_closed=False)
    holds = await rt.repo.storm_holds([s["id"] for s in storms])
    return [{**s, "held": holds.get(s["id"], []),
             "phrase": nodes_phrase(s["cause"]["key"], s["cause"]["value"])} for s in storms]


async def _storm_context(rt: Runtime, storm: StormRecord) -> dict[str, object]:
    analysis = storm["analysis"] or {}
    listed, notes = analysis.get("candidates"), analysis.get("notes")
    candidates = [c for c in (listed if isinstance(listed, list) else []) if isinstance(c, dict)]
    held = (await rt.repo.storm_holds([storm["id"]])).get(storm["id"], [])
    events = await rt.repo.storm_events(storm["id"])
    return {
        "storm": storm, "held": held, "events": events,
        "tested": [c for c in candidates if c.get("p_value") is not None],
        "described": [c for c in candidates if c.get("p_value") is None],
        "phrase": nodes_phrase(storm["cause"]["key"], storm["cause"]["value"]),
        "notes": list(notes) if isinstance(notes, list) else [],
    }


def _answer(request: Request, template: str, context: Mapping[str, object], purpose: str, status_code: int = 200
            ) -> Response:
    csrf = csrf_of(request)
    nonce, fresh = csrf.nonce(request)
    response = page(template, {"nav_here": "/storms", "refresh": 0, **context, "csrf": csrf.token(nonce, purpose)},
                    status_code)
    if fresh:
        csrf.set_cookie(response, nonce)
    return response


# -- the UI (signed in, or an open loopback UI to look) -----------------------------------------------------


@router.get("/storms", response_class=HTMLResponse)
async def storms_page(rt: RuntimeDep, who: SignedIn) -> Response:
    storms = await rt.repo.list_storms(include_closed=True)
    holds = await rt.repo.storm_holds([s["id"] for s in storms])
    return page("storms.html", {"nav_here": "/storms", "signed_in": who, "storms": storms, "holds": holds,
                                "refresh": 30})


@router.get("/storms/{storm_id}", response_class=HTMLResponse)
async def storm_page(storm_id: str, request: Request, rt: RuntimeDep, who: SignedIn) -> Response:
    storm = await rt.repo.get_storm(storm_id)
    if storm is None:
        return message_page("No such storm", f"There is no storm {storm_id}.", 404, link="/storms")
    done = _DONE.get(request.query_params.get("done") or "")
    return _answer(request, "storm.html", {
        **await _storm_context(rt, storm), "signed_in": who, "done": done, "action": f"/storms/{storm_id}/decision",
        "link_mode": False,
    }, _ui_purpose(storm_id))


@router.post("/storms/{storm_id}/decision", response_class=HTMLResponse)
async def storm_decision(storm_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep, who: SignedIn
                         ) -> Response:
    """Approve or reject the group: the first POST answers the confirmation, the one with `confirmed=yes`
    decides as `who`."""
    form = await request.form()
    back = f"/storms/{storm_id}"
    field = form.get("csrf")
    if not csrf_of(request).valid(request, field if isinstance(field, str) else "", _ui_purpose(storm_id)):
        return message_page("Form could not be verified", "The form did not carry a valid security token for this "
                            "browser; nothing was decided. Reload the page and try again.", 403, link=back)
    if who is None:
        return message_page("Sign in first", _REFUSED, 403, link=f"/login?next={back}")
    decision = DECISIONS.get(str(form.get("decision") or ""))
    if decision is None:
        return message_page("Choose approve or reject", "Nothing was decided.", 400, link=back)
    reason, problem = _reason(form)
    if problem is not None or reason is None:
        return message_page("Reason not accepted", f"{problem} Nothing was decided.", 422, link=back)
    if decision == "rejected" and not reason:
        return message_page("A reason is needed", "Rejecting a storm cancels every remediation it holds: say why. "
                            "Nothing was decided.", 422, link=back)
    if not Approvals(rt).allowed(who):
        return message_page("Not an approver", f"{who} is not on the list of approvers; nothing was decided.", 403,
                            link=back)
    storm = await rt.repo.get_storm(storm_id)
    if storm is None:
        return message_page("No such storm", f"There is no storm {storm_id}.", 404, link="/storms")
    if storm["state"] != StormState.OPEN:
        return _decided(storm, back)
    if str(form.get("confirmed") or "") != "yes":
        said = await describe_decision(rt, storm_id, decision, actor=who)
        return _answer(request, "storm_confirm.html", {
            "signed_in": who, "storm": storm, "said": said, "decision": decision,
            "verb": "approve" if decision == "approved" else "reject", "reason": reason, "action": request.url.path,
        }, _ui_purpose(storm_id))
    return await _decide(rt, worker, storm_id, decision, who, reason, back, f"{back}?done={decision}")


def _decided(storm: Mapping[str, object], back: str) -> Response:
    by = f" by {storm['decided_by']}" if storm.get("decided_by") else ""
    return message_page("Already decided", f"Storm {storm['id']} is {storm['state']}{by}; nothing was decided.",
                        409, link=back)


async def _decide(rt: Runtime, worker: Wakes | None, storm_id: str, decision: str, who: str, reason: str,
                  back: str, done: str) -> Response:
    record = await decide_storm(rt, storm_id, decision, actor=who, reason=reason or None)
    if record is None:
        return message_page("No such storm", f"There is no storm {storm_id}.", 404, link="/storms")
    if record["state"] != decision:
        return _decided(record, back)
    if worker is not None:
        worker.wake()
    return RedirectResponse(done, status_code=303)


# -- the approve-group link (its token stands in for a sign-in, for this storm only) -------------------------


async def _link_storm(storm_id: str, token: str, rt: Runtime) -> StormRecord | Response:
    if len(token) != 43 or not token.replace("-", "").replace("_", "").isalnum():
        return message_page("Link not valid", "This is not a valid storm link (it may have been cut off).", 400)
    storm = await rt.repo.storm_by_link(storm_id, hash_token(token))
    if storm is None:
        return message_page("Link not valid", "No storm has this link (it may have been altered).", 404)
    return storm


async def _link_page(request: Request, rt: Runtime, storm: StormRecord, token: str, *, status_code: int = 200,
                     notice: str | None = None, error: str | None = None, typed: str = "") -> Response:
    identity = await header_identity(request, rt)
    context = await _storm_context(rt, storm)
    said = {d: await describe_decision(rt, storm["id"], d, actor=identity or "the name you type")
            for d in ("approved", "rejected")} if storm["state"] == StormState.OPEN else {}
    return _answer(request, "storm.html", {
        **context, "signed_in": identity, "link_mode": True, "action": request.url.path, "said": said,
        "needs_name": identity is None and not rt.settings.approver_header, "notice": notice, "error": error,
        "typed": typed,
    }, _link_purpose(token), status_code)


@link_router.get("/storms/{storm_id}/approval/{token}", response_class=HTMLResponse)
async def link_page(storm_id: str, token: str, request: Request, rt: RuntimeDep) -> Response:
    found = await _link_storm(storm_id, token, rt)
    if isinstance(found, Response):
        return found
    return await _link_page(request, rt, found, token)


@link_router.post("/storms/{storm_id}/approval/{token}", response_class=HTMLResponse)
async def link_decision(storm_id: str, token: str, request: Request, rt: RuntimeDep, worker: WorkerDep) -> Response:
    found = await _link_storm(storm_id, token, rt)
    if isinstance(found, Response):
        return found
    form = await request.form()
    field, typed = (str(form.get(k) or "") for k in ("csrf", "name"))
    if not csrf_of(request).valid(request, field, _link_purpose(token)):
        return message_page("Form could not be verified", "The form did not carry a valid security token for this "
                            "browser (it may be from another site, or cookies are blocked). Nothing was decided. "
                            "Open the link again and retry.", 403, link=request.url.path)
    if found["state"] != StormState.OPEN:
        return await _link_page(request, rt, found, token, status_code=409,
                                notice=f"This storm was already {found['state']}"
                                       f"{' by ' + str(found['decided_by']) if found.get('decided_by') else ''}; "
                                       "nothing was decided.")
    decision = DECISIONS.get(str(form.get("decision") or ""))
    if decision is None:
        return await _link_page(request, rt, found, token, status_code=400, error="Choose Approve or Reject.",
                                typed=typed)
    reason, problem = _reason(form)
    if problem is not None or reason is None:
        return await _link_page(request, rt, found, token, status_code=422, error=problem, typed=typed)
    if decision == "rejected" and not reason:
        return await _link_page(request, rt, found, token, status_code=422, typed=typed,
                                error="Rejecting cancels every remediation the storm holds: say why.")
    who, why_not = await identity_of(request, rt, typed)
    if who is None:
        return await _link_page(request, rt, found, token, status_code=403 if rt.settings.approver_header else 400,
                                error=why_not, typed=typed)
    if not Approvals(rt).allowed(who):
        return message_page("Not an approver", f"{who} is not on the list of approvers; nothing was decided.", 403,
                            link=request.url.path)
    record = await decide_storm(rt, storm_id, decision, actor=who, reason=reason or None)
    if record is None:  # pragma: no cover - storms are never deleted
        return message_page("No such storm", f"There is no storm {storm_id}.", 404)
    if record["state"] != decision:
        return await _link_page(request, rt, record, token, status_code=409,
                                notice=f"This storm was already {record['state']} by {record['decided_by']}; "
                                       "nothing was decided.")
    if worker is not None:
        worker.wake()
    ids = record.get("released") or record.get("cancelled")
    count = len(ids) if isinstance(ids, list) else 0
    verb = "released" if decision == "approved" else "cancelled"
    return await _link_page(request, rt, record, token,
                            notice=f"Recorded: {decision} by {who}; {count} held remediation"
                                   f"{'' if count == 1 else 's'} {verb}.")
