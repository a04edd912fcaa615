"""Slack interactivity: `POST /slack/interactions` for the Approve/Reject buttons in Slack messages.

Enabled only when `REMEDIATOR_SLACK_SIGNING_SECRET` is set. The signature is checked on the raw body before
anything is parsed; then a `block_actions` payload with action_id `approve` or `reject` and the request's
token (or a remediation id) as value goes through the same decision path as the approval page. The approver
is Slack's immutable user id, recorded as `slack:<id>` and matched against the allowlist in that form
(`slack:U012AB3CD`); usernames and e-mail addresses, which users can change, decide nothing. A decision
taken here is followed up through the payload's `response_url` (who decided, what happens now).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from remediator.adapters.notifier import slack_escape
from remediator.adapters.slack_signature import verify
from remediator.api.body_limit import read_body
from remediator.api.deps import RuntimeDep, WorkerDep
from remediator.engine.approvals import ApprovalDecision, ApprovalOutcome, Approvals
from remediator.errors import ApprovalError, BodyTooLarge, SignatureError

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["slack"], include_in_schema=False)

MAX_BODY = 256 * 1024
_DECISIONS: dict[str, ApprovalDecision] = {"approve": "approved", "reject": "rejected"}
_SLACK_ID = re.compile(r"^[A-Z][A-Z0-9]{2,31}$")  # U012AB3CD, or W012A3CDE on Enterprise Grid


def _reply(text: str, status_code: int = 200) -> JSONResponse:
    """An ephemeral answer to the clicker; Slack reads it as mrkdwn, and it may quote a user's name."""
    return JSONResponse(
        {"response_type": "ephemeral", "replace_original": False, "text": slack_escape(text, 3000)},
        status_code=status_code,
    )


def _user(payload: Mapping[str, object]) -> tuple[str | None, str]:
    """(Slack's immutable user id or None, the display name for replies only).

    Usernames, display names and e-mail addresses can be changed by the user; only the id decides.
    """
    user = payload.get("user")
    user = user if isinstance(user, dict) else {}
    user_id = str(user.get("id") or "").strip()
    label = str(user.get("username") or user.get("name") or "")[:100]
    return (user_id if _SLACK_ID.match(user_id) else None), label


def _summary(outcome: ApprovalOutcome) -> str:
    approval = outcome.view.approval
    if outcome.result in ("decided", "already"):
        verb = "Recorded" if outcome.result == "decided" else "Already decided"
        return f"{verb}: step {approval.step_name} {approval.decision} by {approval.decided_by}."
    if outcome.result == "expired":
        return "This approval request has expired; nothing was changed."
    return f"The remediation is {outcome.view.remediation.state}; it no longer waits for a decision."


@router.post("/slack/interactions")
async def interactions(request: Request, rt: RuntimeDep, worker: WorkerDep) -> JSONResponse:
    secret = rt.settings.slack_signing_secret
    if not secret:
        return JSONResponse({"error": "Slack interactivity is not enabled"}, status_code=404)
    try:
        body = await read_body(request, MAX_BODY)
    except BodyTooLarge:
        return JSONResponse({"error": "body too large"}, status_code=413)
    try:
        verify(
            secret,
            request.headers.get("x-slack-request-timestamp"),
            request.headers.get("x-slack-signature"),
            body,
        )
    except SignatureError as exc:
        log.warning("rejected a Slack interaction: %s", exc.reason)
        return JSONResponse({"error": f"signature check failed: {exc.reason}"}, status_code=401)
    try:
        payload = json.loads(parse_qs(body.decode()).get("payload", ["{}"])[0])
    except (ValueError, UnicodeDecodeError):
        return JSONResponse({"error": "payload is not JSON"}, status_code=400)
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        return _reply("Nothing to do for this interaction.")
    actions = [
        a for a in payload.get("actions") or [] if isinstance(a, dict) and a.get("action_id") in _DECISIONS
    ]
    if not actions:
        return _reply("Nothing to do for this interaction.")
    action = actions[0]
    decision = _DECISIONS[str(action["action_id"])]
    value = str(action.get("value") or "")
    user_id, label = _user(payload)
    if user_id is None:
        return _reply("Slack did not say who you are (no user id); nothing was decided.")
    actor = f"slack:{user_id}"
    approvals = Approvals(rt)
    if not approvals.allowed(actor):
        return _reply(f"{actor} ({label}) is not on the list of approvers; nothing was decided.")
    try:
        if len(value) == 43:
            outcome = await approvals.record_decision(value, decision, actor=actor, source="slack")
        else:
            outcome = await approvals.decide_for(value, decision, actor=actor, source="slack")
    except ApprovalError as exc:
        return _reply(exc.reason)
    if outcome.result == "decided" and worker is not None:
        worker.wake()
    response_url = payload.get("response_url")
    if outcome.result == "decided" and isinstance(response_url, str) and response_url and rt.notifier is not None:
        await rt.notifier.slack_follow_up(
            response_url, outcome.view.remediation.id, decision, _follow_up(outcome, label)
        )
    return _reply(_summary(outcome))


def _follow_up(outcome: ApprovalOutcome, label: str) -> str:
    """Who decided in Slack, and what the remediation does now."""
    approval, rem = outcome.view.approval, outcome.view.remediation
    who = f"{approval.decided_by} ({label})" if label else str(approval.decided_by)
    if approval.decision == "approved":
        after = f"the remediation continues with step {approval.step_name}."
    else:
        after = f"the remediation stopped before step {approval.step_name}; nothing more is done."
    return f"Step *{approval.step_name}* {approval.decision} in Slack by {who}: {after} (state: {rem.state})"
