"""Approval links and the bearer API for decisions.

`GET /approvals/{token}` shows what will happen and never changes anything (Slack's unfurler and mail
scanners fetch every link). `POST /approvals/{token}` is the decision: CSRF-checked, the approver named by the
trusted proxy header or the form, checked against the optional allowlist, recorded once. The bearer API
`POST /api/v1/remediations/{id}/approve|reject` takes the same path for ChatOps and scripts.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field

from remediator.api.csrf import Csrf
from remediator.api.deps import Auth, RuntimeDep, WorkerDep
from remediator.api.routes.remediations import actor_of
from remediator.api.schemas import RemediationOut, summary_out
from remediator.api.signin import sign_in_of
from remediator.api.templating import page
from remediator.api.ui_facts import remediation_facts
from remediator.engine.approvals import ApprovalDecision, ApprovalOutcome, Approvals, ApprovalView, hash_token
from remediator.engine.return_gate import stored_gate
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Wakes
from remediator.errors import ApprovalError

__all__ = [
    "api_router",
    "csrf_of",
    "identity_of",
    "message_page",
    "outcome_notice",
    "outcome_status",
    "router",
]

router = APIRouter(tags=["approvals"], include_in_schema=False)
api_router = APIRouter(prefix="/api/v1/remediations", dependencies=[Auth], tags=["remediations"])

_DECISIONS: dict[str, ApprovalDecision] = {"approve": "approved", "reject": "rejected"}
_OUTCOME_STATUS = {"decided": 200, "already": 409, "expired": 410, "closed": 409}


def csrf_of(request: Request) -> Csrf:
    csrf: Csrf = request.app.state.csrf
    return csrf


def outcome_status(outcome: ApprovalOutcome) -> int:
    return _OUTCOME_STATUS[outcome.result]


def message_page(title: str, message: str, status_code: int, *, link: str | None = None) -> HTMLResponse:
    """A clear page for anything that is not the happy path (never a stack trace)."""
    return page(
        "message.html", {"title": title, "message": message, "link": link, "status": status_code}, status_code
    )


async def identity_of(request: Request, rt: Runtime, typed: str | None) -> tuple[str | None, str | None]:
    """(who, None) or (None, why not): the signed-in person (trusted proxy header or UI session) when there
    is one; else, with a proxy header configured, nobody; else the typed name."""
    who = await sign_in_of(request).who(request)
    if who is not None:
        return who, None
    header = rt.settings.approver_header
    if header:
        return None, f"Your sign-in proxy did not say who you are (header {header} is missing)."
    name = (typed or "").strip()
    if not name:
        return None, "Type your name: the audit log records who decided."
    if len(name) > 100 or not name.isprintable():
        return None, "A name is at most 100 printable characters."
    return name, None


async def header_identity(request: Request, rt: Runtime) -> str | None:
    """The signed-in person shown on the approval page (None: the form asks for a name)."""
    return await sign_in_of(request).who(request)


def _purpose(token: str) -> str:
    return f"approval:{hash_token(token)}"


async def _approval_page(
    request: Request,
    rt: Runtime,
    view: ApprovalView,
    token: str,
    *,
    status_code: int = 200,
    notice: str | None = None,
    error: str | None = None,
    typed: str = "",
) -> HTMLResponse:
    csrf = csrf_of(request)
    nonce, fresh = csrf.nonce(request)
    identity = await header_identity(request, rt)
    context: dict[str, object] = {
        "view": view,
        "rem": view.remediation,
        "approval": view.approval,
        "plan_only": rt.plan_only,
        "csrf": csrf.token(nonce, _purpose(token)),
        "identity": identity,
        "needs_name": identity is None and not rt.settings.approver_header,
        "notice": notice,
        "error": error,
        "typed": typed,
        "ui_link": f"/remediations/{view.remediation.id}",
        "signed_in": identity,
        "facts": remediation_facts(rt.settings, view.remediation, None),
        "return_gate": stored_gate(rt.actions, view.remediation, await rt.repo.steps(view.remediation.id)),
    }
    response = page("approval.html", context, status_code)
    if fresh:
        csrf.set_cookie(response, nonce)
    return response


def outcome_notice(outcome: ApprovalOutcome) -> str:
    approval = outcome.view.approval
    if outcome.result == "decided" or outcome.result == "already":
        prefix = "Recorded: " if outcome.result == "decided" else "This request was already decided: "
        return (
            f"{prefix}{approval.decision} by {approval.decided_by} at "
            f"{approval.decided_at:%Y-%m-%d %H:%M:%S} UTC ({approval.decision_source})."
        )
    if outcome.result == "expired":
        return "This request expired before a decision; nothing was changed."
    if approval.decision == "superseded":
        when = f" at {approval.decided_at:%Y-%m-%d %H:%M:%S} UTC" if approval.decided_at else ""
        return (f"This request was superseded by {approval.decided_by}{when} ({approval.decision_source}); "
                f"the remediation is {outcome.view.remediation.state} and nothing was decided.")
    return f"The remediation is no longer waiting for this decision (it is {outcome.view.remediation.state})."


@router.get("/approvals/{token}", response_class=HTMLResponse)
async def approval_page(token: str, request: Request, rt: RuntimeDep) -> Response:
    try:
        view = await Approvals(rt).view(token)
    except ApprovalError as exc:
        return message_page("Approval link not valid", exc.reason, exc.status_code)
    status_code = 410 if view.status == "expired" else 200
    return await _approval_page(request, rt, view, token, status_code=status_code)


@router.post("/approvals/{token}", response_class=HTMLResponse)
async def approval_decision(token: str, request: Request, rt: RuntimeDep, worker: WorkerDep) -> Response:
    approvals = Approvals(rt)
    try:
        view = await approvals.view(token)
    except ApprovalError as exc:
        return message_page("Approval link not valid", exc.reason, exc.status_code)
    form = await request.form()
    field, typed, comment = (str(form.get(k) or "") for k in ("csrf", "name", "comment"))
    if not csrf_of(request).valid(request, field, _purpose(token)):
        return message_page(
            "Form could not be verified",
            "The form did not carry a valid security token for this browser (it may be from another site, or "
            "cookies are blocked). Nothing was decided. Open the approval link again and retry.",
            403,
            link=f"/approvals/{token}",
        )
    decision = _DECISIONS.get(str(form.get("decision") or ""))
    if decision is None:
        return await _approval_page(
            request, rt, view, token, status_code=400, error="Choose Approve or Reject.", typed=typed
        )
    who, problem = await identity_of(request, rt, typed)
    if who is None:
        status_code = 403 if rt.settings.approver_header else 400
        return await _approval_page(request, rt, view, token, status_code=status_code, error=problem, typed=typed)
    if not approvals.allowed(who):
        return message_page(
            "Not an approver",
            f"{who} is not on the list of approvers; nothing was decided.",
            403,
            link=f"/approvals/{token}",
        )
    outcome = await approvals.decide_request(
        view, decision, actor=who, source="page", comment=comment.strip()[:500] or None
    )
    if outcome.result == "decided" and worker is not None:
        worker.wake()
    return await _approval_page(
        request, rt, outcome.view, token, status_code=outcome_status(outcome), notice=outcome_notice(outcome)
    )


class DecisionIn(BaseModel):
    """Optional body of the bearer API: who asked (when no proxy header names them) and why."""

    by: str | None = Field(default=None, max_length=100)
    comment: str | None = Field(default=None, max_length=500)


async def _api_decide(
    rem_id: str,
    decision: ApprovalDecision,
    request: Request,
    rt: Runtime,
    worker: Wakes | None,
    body: DecisionIn | None,
) -> RemediationOut:
    approvals = Approvals(rt)
    actor = actor_of(request)
    named = (body.by or "").strip() if body is not None else ""
    if actor == "api" and named:
        if not named.isprintable():
            raise HTTPException(422, "by: a name of printable characters")
        actor = f"api:{named}"
    if any(a.strip() for a in rt.settings.approvers):
        if actor == "api":
            raise HTTPException(
                403,
                "an approver allowlist (REMEDIATOR_APPROVERS) is set: name the approver with \"by\" in the body "
                "(or through the trusted approver header); nothing was decided",
            )
        if not approvals.allowed(actor.removeprefix("api:")):
            raise HTTPException(403, f"{actor} is not on the list of approvers; nothing was decided")
    try:
        outcome = await approvals.decide_for(
            rem_id, decision, actor=actor, source="api", comment=body.comment if body else None
        )
    except ApprovalError as exc:
        raise HTTPException(exc.status_code, exc.reason) from exc
    if outcome.result != "decided":
        raise HTTPException(outcome_status(outcome), outcome_notice(outcome))
    if worker is not None:
        worker.wake()
    return summary_out(outcome.view.remediation)


@api_router.post("/{rem_id}/approve", response_model=RemediationOut, responses={404: {}, 409: {}, 410: {}})
async def api_approve(
    rem_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep, body: DecisionIn | None = None
) -> RemediationOut:
    """Approve the step a remediation is waiting on (same single-use decision as the approval page)."""
    return await _api_decide(rem_id, "approved", request, rt, worker, body)


@api_router.post("/{rem_id}/reject", response_model=RemediationOut, responses={404: {}, 409: {}, 410: {}})
async def api_reject(
    rem_id: str, request: Request, rt: RuntimeDep, worker: WorkerDep, body: DecisionIn | None = None
) -> RemediationOut:
    """Reject the step a remediation is waiting on; the remediation ends in `rejected`."""
    return await _api_decide(rem_id, "rejected", request, rt, worker, body)
