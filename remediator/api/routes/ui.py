"""The web UI: server-rendered pages that work without JavaScript and on a phone.

`/` lists remediations (filter by state and node; refreshes itself with a meta refresh), and
`/remediations/{id}` shows one: the audit timeline, steps with results, affected pods, alert labels, and
approve/reject forms while it waits. Those forms use the same CSRF check, identity rules and single-use
decision path as the approval page. A banner shows the kill switch, plan-only mode and guardrail trips.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from remediator.api.deps import RuntimeDep, WorkerDep
from remediator.api.routes.approvals import csrf_of, identity_of, message_page, outcome_notice, outcome_status
from remediator.api.signin import SignedIn, require_sign_in
from remediator.api.templating import page
from remediator.api.ui_facts import display_state, event_step, list_facts, remediation_facts
from remediator.engine.approval_decisions import approval_status
from remediator.engine.approvals import Approvals, Decision
from remediator.engine.guardrail_status import guardrail_status
from remediator.engine.notifications import pods_of
from remediator.engine.runtime import Runtime
from remediator.engine.states import STATES
from remediator.errors import ApprovalError

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["ui"], include_in_schema=False, dependencies=[Depends(require_sign_in)])

_DECISIONS: dict[str, Decision] = {"approve": "approved", "reject": "rejected"}


def _definitions_status(rt: Runtime) -> dict[str, Any]:
    """What `_definitions_banner.html` needs: a refused reload is shown on every page."""
    last = rt.definitions.last_reload
    return {"version": rt.definitions.current.version, "last_reload": last.as_dict() if last is not None else None}


async def _banner(rt: Runtime) -> dict[str, Any]:
    try:
        return await guardrail_status(rt)
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
    rem_id: str, request: Request, rt: RuntimeDep, who: SignedIn, decided: str | None = None
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
    now = rt.repo._clock()
    context = {
        "nav_here": None,
        "signed_in": who,
        "rem": rem,
        "shown_state": display_state(rem, rows),
        "facts": remediation_facts(rt.settings, rem, alert.generator_url if alert is not None else None),
        "steps": approvals.preview(
            rem, rows, gated=view.approval.step_index if view is not None and rem.state == "awaiting_approval" else None
        ),
        "revert_rows": [r for r in rows if r.phase == "revert"],
        "timeline": [
            {"ts": e.ts, "kind": e.kind, "actor": e.actor, "data": e.data, "step": event_step(e)}
            for e in await rt.repo.list_audit(remediation_id=rem_id, limit=2000)
        ],
        "approvals": [(a, approval_status(a, rem, now)) for a in await rt.repo.approvals_of(rem_id)],
        "view": view,
        "pods": pods_of(rem.context),
        "banner": await _banner(rt),
        "status": _definitions_status(rt),
        "csrf": csrf.token(nonce, f"ui:{rem_id}"),
        "needs_name": who is None and not rt.settings.approver_header,
        "identity": who,
        "decided": decided if decided in ("approved", "rejected") else None,
        "refresh": 5 if rem.state in ("pending", "running", "reverting") else 0,
    }
    response = page("detail.html", context)
    if fresh:
        csrf.set_cookie(response, nonce)
    return response


@router.post("/remediations/{rem_id}/decision", response_class=HTMLResponse)
async def decide(rem_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep, who: SignedIn) -> Response:
    form = await request.form()
    field, typed, comment = (str(form.get(k) or "") for k in ("csrf", "name", "comment"))
    back = f"/remediations/{rem_id}"
    if not csrf_of(request).valid(request, field, f"ui:{rem_id}"):
        return message_page(
            "Form could not be verified",
            "The form did not carry a valid security token for this browser; nothing was decided. "
            "Reload the page and try again.",
            403,
            link=back,
        )
    decision = _DECISIONS.get(str(form.get("decision") or ""))
    if decision is None:
        return message_page("No decision", "Choose Approve or Reject.", 400, link=back)
    if who is None:  # an open (loopback) UI without a signed-in person: the proxy header or the typed name
        who, problem = await identity_of(request, rt, typed)
        if who is None:
            return message_page(
                "Who are you?", problem or "", 400 if not rt.settings.approver_header else 403, link=back
            )
    approvals = Approvals(rt)
    if not approvals.allowed(who):
        return message_page(
            "Not an approver", f"{who} is not on the list of approvers; nothing was decided.", 403, link=back
        )
    try:
        outcome = await approvals.decide_for(
            rem_id, decision, actor=who, source="ui", comment=comment.strip()[:500] or None
        )
    except ApprovalError as exc:
        return message_page("Cannot decide", exc.reason, exc.status_code, link=back)
    if outcome.result != "decided":
        return message_page("Not decided", outcome_notice(outcome), outcome_status(outcome), link=back)
    if worker is not None:
        worker.wake()
    return RedirectResponse(f"{back}?decided={decision}", status_code=303)
