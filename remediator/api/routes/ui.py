"""The web UI: server-rendered pages that work without JavaScript and on a phone.

`/` lists remediations (filter by state and node; refreshes itself with a meta refresh), and
`/remediations/{id}` shows one: the audit timeline, steps with results, affected pods, alert labels, and the
moves a person may make on it now (approve and reject while an approval is open, cancel, release, revert,
return to service with its skips). A move is a form to `POST /remediations/{id}/moves`: it needs a signed-in
person (also on a loopback UI that is otherwise open), the page's CSRF token and, for cancel and return, a
reason; the first POST answers a confirmation that says what will happen (engine/move_preview.py, from the
undo plan the executor runs), the confirmed one calls the same engine functions as the API
(engine/overrides.py, the approvals' single-use decision) with that person as the actor. A banner shows the
kill switch, plan-only mode and guardrail trips.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from remediator.api.deps import RuntimeDep, WorkerDep
from remediator.api.routes.approvals import csrf_of, message_page, outcome_notice, outcome_status
from remediator.api.signin import SignedIn, require_sign_in
from remediator.api.templating import page
from remediator.api.ui_facts import display_state, event_step, list_facts, remediation_facts
from remediator.domain.returns import SKIPS
from remediator.domain.states import ACTIVE_STATES, STATES, State
from remediator.engine import overrides
from remediator.engine.approval_decisions import approval_status
from remediator.engine.approvals import ApprovalDecision, Approvals, ApprovalView
from remediator.engine.guardrail_status import guardrail_status
from remediator.engine.move_preview import MOVES, REASON_REQUIRED, offered_moves, preview
from remediator.engine.notifications import pods_of
from remediator.engine.return_gate import stored_gate
from remediator.engine.runtime import Runtime
from remediator.errors import ApprovalError, IllegalTransition, RemediatorError
from remediator.store.models import Remediation

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["ui"], include_in_schema=False, dependencies=[Depends(require_sign_in)])

_DECISIONS: dict[str, ApprovalDecision] = {"approve": "approved", "reject": "rejected"}
# What the page says after a move (`?done=`).
_DONE: dict[str, str] = {
    "approve": "Approved: the remediation goes on.",
    "reject": "Rejected: the remediation ends here.",
    "cancel": "Cancelled: it stopped where it was; nothing was undone.",
    "release": "Released past its holds: it runs again.",
    "revert": "Revert requested: the undo runs now.",
    "return": "Return to service requested: the undo runs now.",
}


def _definitions_status(rt: Runtime) -> dict[str, object]:
    """What `_definitions_banner.html` needs: a refused reload is shown on every page."""
    last = rt.definitions.last_reload
    return {"version": rt.definitions.current.version, "last_reload": last.as_dict() if last is not None else None}


async def _banner(rt: Runtime) -> Mapping[str, object]:
    try:
        return await guardrail_status(rt)
    # broad: the banner is decoration; whatever reading the guardrail status raises (store, cluster, a bug) is shown on
    # the page instead of failing it
    except Exception as exc:
        log.warning("guardrail status unavailable for the banner: %s", exc)
        return {"error": str(exc), "plan_only": rt.plan_only}


@router.get("/", response_class=HTMLResponse)
async def index(
    rt: RuntimeDep,
    who: SignedIn,
    state: Annotated[str | None, Query(max_length=32)] = None,
    node: Annotated[str | None, Query(max_length=253)] = None,
    refresh: Annotated[int, Query(ge=0, le=3600)] = 10,
) -> Response:
    state = state or None
    node = (node or "").strip() or None
    unknown = state is not None and state not in STATES
    lines = [] if unknown else await rt.repo.remediation_summaries(state=state, node=node, limit=200)
    rows = [{"rem": line, "state": display_state(line), "facts": list_facts(line)} for line in lines]
    counts = await rt.repo.count_by_state()
    return page(
        "index.html",
        {
            "nav_here": "/",
            "signed_in": who,
            "rows": rows,
            "state": state or "",
            "node": node or "",
            "states": STATES,
            "counts": counts,
            "refresh": refresh,
            "banner": await _banner(rt),
            "status": _definitions_status(rt),
            "unknown_state": unknown,
        },
    )


@router.get("/remediations/{rem_id}", response_class=HTMLResponse)
async def detail(
    rem_id: str, request: Request, rt: RuntimeDep, who: SignedIn, done: str | None = None
) -> Response:
    rem = await rt.repo.get(rem_id)
    if rem is None:
        return message_page("Not found", f"There is no remediation {rem_id}.", 404, link="/")
    approvals = Approvals(rt)
    rows = await rt.repo.steps(rem_id)
    view = await approvals.view_for(rem_id)
    csrf = csrf_of(request)
    nonce, fresh = csrf.nonce(request)
    alert = await rt.repo.get_alert(rem.alert_id) if rem.alert_id is not None else None
    now = rt.clock()
    approval_open = _approval_open(rem, view)
    context = {
        "nav_here": None,
        "signed_in": who,
        "rem": rem,
        "shown_state": display_state(rem, rows),
        "facts": remediation_facts(rt.settings, rem, alert.generator_url if alert is not None else None),
        "steps": approvals.preview(
            rem, rows,
            gated=view.approval.step_index if view is not None and rem.state == State.AWAITING_APPROVAL else None,
        ),
        "revert_rows": [r for r in rows if r.phase == "revert"],
        "return_gate": stored_gate(rt.actions, rem, rows),
        "active": rem.state in ACTIVE_STATES,  # a remediation that moves again (a revert) is not finished
        "timeline": [
            {"ts": e.ts, "kind": e.kind, "actor": e.actor, "data": e.data, "step": event_step(e)}
            for e in await rt.repo.list_audit(remediation_id=rem_id, limit=2000)
        ],
        "approvals": [(a, approval_status(a, rem, now)) for a in await rt.repo.approvals_of(rem_id)],
        "view": view if approval_open else None,
        "moves": await offered_moves(rt, rem, approval_open=approval_open),
        "skips": SKIPS,
        "pods": pods_of(rem.context),
        "banner": await _banner(rt),
        "status": _definitions_status(rt),
        "csrf": csrf.token(nonce, f"ui:{rem_id}"),
        "done": _DONE.get(done or ""),
        "refresh": 5 if rem.state in (State.PENDING, State.RUNNING, State.REVERTING) else 0,
    }
    response = page("detail.html", context)
    if fresh:
        csrf.set_cookie(response, nonce)
    return response


def _approval_open(rem: Remediation, view: ApprovalView | None) -> bool:
    return view is not None and view.status == "pending" and rem.state == State.AWAITING_APPROVAL


def _form_text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value.strip() if isinstance(value, str) else ""


@router.post("/remediations/{rem_id}/moves", response_class=HTMLResponse)
async def move_form(rem_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep, who: SignedIn) -> Response:
    """A person's move from the remediation page: the first POST answers the confirmation (nothing is done),
    the one with `confirmed=yes` does it through the engine functions the API uses, as `who`."""
    form = await request.form()
    back = f"/remediations/{rem_id}"
    if not csrf_of(request).valid(request, _form_text(form, "csrf"), f"ui:{rem_id}"):
        return message_page(
            "Form could not be verified",
            "The form did not carry a valid security token for this browser; nothing was done. "
            "Reload the page and try again.",
            403,
            link=back,
        )
    if who is None:  # also on a loopback UI that is otherwise open: a move is recorded under a person
        return message_page(
            "Sign in first", "A move on a remediation is recorded under a signed-in person; nothing was done. "
            "Sign in and try again.", 403, link=f"/login?next={back}",
        )
    action = _form_text(form, "action")
    if action not in MOVES:
        return message_page("Nothing to do", f"Choose one of: {', '.join(MOVES)}.", 400, link=back)
    rem = await rt.repo.get(rem_id)
    if rem is None:
        return message_page("Not found", f"There is no remediation {rem_id}.", 404, link="/")
    reason = _form_text(form, "reason")
    if len(reason) > 500 or not reason.replace("\n", " ").replace("\r", " ").isprintable():
        return message_page("Reason not accepted", "A reason is at most 500 printable characters.", 422, link=back)
    if action in REASON_REQUIRED and not reason:
        return message_page(
            "A reason is required", f"Say why you {action} this remediation: the reason is kept with the move "
            "in the audit log. Nothing was done.", 422, link=back,
        )
    skip = [s for s in SKIPS if s in form.getlist("skip")] if action == "return" else []
    approvals = Approvals(rt)
    view = await approvals.view_for(rem_id)
    offered = await offered_moves(rt, rem, approval_open=_approval_open(rem, view))
    if action not in offered:
        now_allowed = f"what can be done now: {', '.join(offered)}" if offered else "nothing can be done now"
        return message_page(
            "Not allowed now", f"Cannot {action} a remediation that is {rem.state}; {now_allowed}. Nothing was done.",
            409, link=back,
        )
    if action in _DECISIONS and not approvals.allowed(who):
        return message_page(
            "Not an approver", f"{who} is not on the list of approvers; nothing was decided.", 403, link=back
        )
    seen = _form_text(form, "seen_state")
    if _form_text(form, "confirmed") != "yes":
        said = await preview(
            rt, rem, action, skip=skip, approval_step=view.approval.step_index if view is not None else None
        )
        return page("move_confirm.html", {
            "nav_here": None, "signed_in": who, "refresh": 0, "rem": rem, "preview": said, "reason": reason,
            "skip": skip, "csrf": _form_text(form, "csrf"), "action": action,
        })
    if seen != rem.state:
        return message_page(
            "It moved on", f"The remediation is {rem.state} now, not {seen or 'what the confirmation showed'}; "
            "nothing was done. Look at it again and confirm anew.", 409, link=back,
        )
    try:
        await _do_move(rt, approvals, rem_id, action, who, reason, skip)
    except _NotDecided as nope:
        return message_page("Not decided", nope.notice, nope.status, link=back)
    except ApprovalError as exc:
        return message_page("Cannot decide", exc.reason, exc.status_code, link=back)
    except IllegalTransition as exc:
        return message_page("Not allowed now", f"{exc}. Nothing was done.", 409, link=back)
    if worker is not None:
        worker.wake()
    return RedirectResponse(f"{back}?done={action}", status_code=303)


class _NotDecided(RemediatorError):
    def __init__(self, notice: str, status: int) -> None:
        super().__init__(notice)
        self.notice, self.status = notice, status


async def _do_move(
    rt: Runtime, approvals: Approvals, rem_id: str, action: str, who: str, reason: str, skip: Sequence[str]
) -> None:
    """The move itself: the same engine functions the API's handlers call."""
    if action in _DECISIONS:
        outcome = await approvals.decide_for(rem_id, _DECISIONS[action], actor=who, source="ui", comment=reason or None)
        if outcome.result != "decided":
            raise _NotDecided(outcome_notice(outcome), outcome_status(outcome))
    elif action == "cancel":
        await overrides.cancel(rt, rem_id, actor=who, reason=reason)
    elif action == "revert":
        await overrides.revert(rt, rem_id, actor=who, reason=reason or None)
    elif action == "release":
        await overrides.release(rt, rem_id, actor=who, reason=reason or None)
    else:
        await overrides.return_to_service(rt, rem_id, actor=who, reason=reason, skip=skip)
