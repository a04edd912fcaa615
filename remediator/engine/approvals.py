"""Human approval of risky steps: tokens, the page's view of a request, the single decision path, expiry.

A request gets a random 256-bit token that appears only in the link sent to people; the store keeps its
SHA-256, so a database reader cannot approve anything. Every way of deciding (the approval page, the web
UI, the bearer API, Slack buttons) ends in `Approvals.decide_request`, which records the decision with an
atomic compare-and-set in the store: exactly one decision wins, later ones learn who decided what and when.
Reading a request (`view`) never changes anything, because link unfurlers and mail scanners fetch every URL.

Expiry: after `REMEDIATOR_APPROVAL_TTL` an open request expires. The playbook's `on_expiry` says what that
means: `abort` (default) ends the remediation in `expired`; `continue` treats silence as consent and runs
the gated step as if approved (a veto window), with the controller named as the decider in the audit log.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

from remediator.adapters.notifier import PodLine
from remediator.definitions import Step
from remediator.domain.plan_snapshot import plan_of, playbook_of
from remediator.engine.approval_decisions import ApprovalStatus, approval_status, on_expiry
from remediator.engine.notifications import pods_of
from remediator.engine.planning import plan_steps, stored_variables, target_of
from remediator.engine.runtime import Runtime
from remediator.errors import ApprovalError
from remediator.store.models import Approval, Remediation, StepRow

__all__ = [
    "ApprovalDecision",
    "ApprovalOutcome",
    "ApprovalView",
    "Approvals",
    "StepPreview",
    "approval_link",
    "hash_token",
    "new_token",
]

log = logging.getLogger(__name__)

TOKEN_BYTES = 32
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")

ApprovalDecision = Literal["approved", "rejected"]
Status = ApprovalStatus  # one vocabulary with the API and the CLI (approval_decisions.approval_status)


def new_token() -> str:
    """256 random bits, URL-safe (43 characters)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def approval_link(public_url: str, token: str) -> str:
    return f"{public_url.rstrip('/')}/approvals/{token}"


def _not_decided(status: Status) -> Literal["already", "expired", "closed"]:
    return "already" if status in ("approved", "rejected") else "expired" if status == "expired" else "closed"


@dataclass(frozen=True)
class StepPreview:
    """One playbook step as the approver sees it."""

    index: int
    name: str
    action: str
    description: str
    params: dict[str, Any]
    status: str  # done result, "needs approval", "will run", "skipped: ..."
    approval: bool
    gated: bool  # the step this request is about


@dataclass(frozen=True)
class ApprovalView:
    """Everything the approval page shows; built without changing anything."""

    approval: Approval
    remediation: Remediation
    status: Status
    seconds_left: int
    steps: list[StepPreview]
    pods: list[PodLine]
    requested_to: list[str]
    approvers: list[str] = field(default_factory=list)

    @property
    def time_left(self) -> str:
        minutes, seconds = divmod(max(self.seconds_left, 0), 60)
        hours, minutes = divmod(minutes, 60)
        if hours:
            return f"{hours} h {minutes} min"
        return f"{minutes} min {seconds} s" if minutes < 5 else f"{minutes} min"


@dataclass(frozen=True)
class ApprovalOutcome:
    """The result of one decision attempt: `decided` by this call, or why not."""

    result: Literal["decided", "already", "expired", "closed"]
    view: ApprovalView


class Approvals:
    """The approval service over one Runtime (cheap to build; holds no state of its own)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    # -- requesting (executor) --------------------------------------------------------------------

    async def request(self, rem: Remediation, step: Step, idx: int) -> str:
        """Stop `rem` before step `idx`, notify with the link; returns the token (only ever in the link)."""
        token = new_token()
        expires = self.rt.clock() + self.rt.settings.approval_ttl
        requested_to = self.requested_to()
        await self.rt.repo.open_approval(
            rem.id,
            self.rt.owner,
            step_index=idx,
            step_name=step.name,
            token_hash=hash_token(token),
            expires_at=expires,
            requested_to=requested_to,
            reason=f"step {step.name} needs approval",
        )
        link = approval_link(self.rt.settings.public_url, token)
        if self.rt.notifier is not None and self.rt.notifier.channels:
            log.info("remediation %s waits for approval of step %s (asked: %s)", rem.id, step.name, requested_to)
        else:
            log.warning(
                "remediation %s waits for approval of step %s; no channel is configured, the approval page is %s",
                rem.id,
                step.name,
                link,
            )
        if self.rt.notifier is not None:
            await self.rt.notifier.remediation_event(
                rem.id,
                "approval_requested",
                f"Step *{step.name}* ({step.action}) needs a human decision.",
                approval_link=link,
                expires_at=expires,
                interactive_value=token,
            )
        return token

    def requested_to(self) -> list[str]:
        channels = self.rt.notifier.channel_names if self.rt.notifier is not None else []
        return [*(f"channel:{c}" for c in channels), *(f"approver:{a}" for a in self.rt.settings.approvers)]

    # -- reading (GET never changes state) --------------------------------------------------------

    async def view(self, token: str) -> ApprovalView:
        """The request behind a link; ApprovalError 400 (malformed) or 404 (unknown or tampered)."""
        if not _TOKEN_RE.match(token):
            raise ApprovalError("this link is not a valid approval link (it may have been cut off)", 400)
        found = await self.rt.repo.approval_by_token_hash(hash_token(token))
        if found is None:
            raise ApprovalError("no approval request has this link (it may have been altered)", 404)
        approval, rem = found
        return await self._view(approval, rem)

    async def view_for(self, rem_id: str) -> ApprovalView | None:
        """The newest request of a remediation (for the UI, which has no token)."""
        rem = await self.rt.repo.get(rem_id)
        approvals = await self.rt.repo.approvals_of(rem_id)
        if rem is None or not approvals:
            return None
        return await self._view(approvals[-1], rem)

    async def _view(self, approval: Approval, rem: Remediation) -> ApprovalView:
        now = self.rt.clock()
        left = int((approval.expires_at - now).total_seconds())
        status: Status = approval_status(approval, rem, now)
        rows = await self.rt.repo.steps(rem.id)
        return ApprovalView(
            approval=approval,
            remediation=rem,
            status=status,
            seconds_left=max(left, 0),
            steps=self.preview(rem, rows, gated=approval.step_index),
            pods=pods_of(rem.context),
            requested_to=list(approval.requested_to),
            approvers=list(self.rt.settings.approvers),
        )

    def preview(self, rem: Remediation, rows: list[StepRow], *, gated: int | None) -> list[StepPreview]:
        """Each playbook step: what it did, or what it will do, rendered the way the executor would."""
        try:
            playbook = playbook_of(rem)
            plan = plan_of(rem)
            planned = plan_steps(playbook, stored_variables(rem, rows), require_approval=plan.require_approval)
        # broad: only a preview; a playbook that no longer renders or plans (template, parse or lookup errors of any
        # kind) shows no steps instead of failing the approval page
        except Exception as exc:
            log.warning("cannot preview the steps of %s: %s", rem.id, exc)
            return []
        done = {r.idx: r for r in rows if r.phase == "forward"}
        out: list[StepPreview] = []
        for p in planned:
            row = done.get(p.index)
            description = p.note or self._describe(rem, p.action, p.params)
            if row is not None and row.status != "running":
                status = row.status
                params = dict(row.params) or p.params
            elif p.waits_for:  # its parameters read an earlier step's output: known once that step ran
                status, params = ("needs approval" if p.index == gated or p.approval else "will run"), {}
            elif p.index == gated:
                status, params = "needs approval", p.params
            elif not p.runs:
                status, params = p.note or "skipped", p.params
            else:
                status, params = ("needs approval" if p.approval else "will run"), p.params
            out.append(
                StepPreview(
                    index=p.index,
                    name=p.name,
                    action=p.action,
                    description=description,
                    params=params,
                    status=status,
                    approval=p.approval,
                    gated=p.index == gated,
                )
            )
        return out

    def _describe(self, rem: Remediation, action_name: str, params: dict[str, Any]) -> str:
        action = self.rt.actions.get(action_name)
        if action is None:
            return action_name
        try:
            return action.describe(target_of(rem), action.parse(params))
        # broad: describe() and parse() run the action's own code on stored parameters; any failure falls back to
        # name(params)
        except Exception:
            return f"{action_name}({', '.join(f'{k}={v}' for k, v in params.items())})"

    # -- deciding (every path ends here) ----------------------------------------------------------

    def allowed(self, *identities: str) -> bool:
        """True when no allowlist is configured, or one of the caller's identities is on it."""
        allow = {a.strip().lower() for a in self.rt.settings.approvers if a.strip()}
        if not allow:
            return True
        return any(i.strip().lower() in allow for i in identities if i)

    async def record_decision(
        self, token: str, decision: ApprovalDecision, *, actor: str, source: str, comment: str | None = None
    ) -> ApprovalOutcome:
        """Record a person's decision on the request this link token names (a Slack button)."""
        view = await self.view(token)
        return await self.decide_request(view, decision, actor=actor, source=source, comment=comment)

    async def decide_for(
        self, rem_id: str, decision: ApprovalDecision, *, actor: str, source: str, comment: str | None = None
    ) -> ApprovalOutcome:
        """Decide the newest request of a remediation (API, UI, Slack without a token)."""
        view = await self.view_for(rem_id)
        if view is None:
            rem = await self.rt.repo.get(rem_id)
            if rem is None:
                raise ApprovalError(f"no remediation {rem_id}", 404)
            raise ApprovalError(f"remediation {rem_id} is {rem.state}; it has never waited for approval", 409)
        return await self.decide_request(view, decision, actor=actor, source=source, comment=comment)

    async def decide_request(
        self, view: ApprovalView, decision: ApprovalDecision, *, actor: str, source: str, comment: str | None = None
    ) -> ApprovalOutcome:
        """Record the decision if the request is still open; otherwise say why it cannot be."""
        if view.status != "pending":
            return ApprovalOutcome(_not_decided(view.status), view)
        won = await self.rt.repo.decide_approval(
            view.approval.id,
            decision=decision,
            actor=actor[:256],
            source=source,
            comment=comment,
        )
        fresh = await self._reload(view)
        if not won:
            return ApprovalOutcome(_not_decided(fresh.status), fresh)
        if self.rt.notifier is not None:
            why = f": {comment}" if comment else "."
            await self.rt.notifier.remediation_event(
                view.remediation.id, decision, f"Step *{view.approval.step_name}* {decision} by {actor}{why}"
            )
        return ApprovalOutcome("decided", fresh)

    async def _reload(self, view: ApprovalView) -> ApprovalView:
        approval = await self.rt.repo.get_approval(view.approval.id)
        rem = await self.rt.repo.get(view.remediation.id)
        if approval is None or rem is None:  # pragma: no cover - rows are never deleted
            return view
        return await self._view(approval, rem)

    # -- expiry (worker) --------------------------------------------------------------------------

    async def expire_due(self) -> int:
        """Close every overdue request the way its playbook says; returns how many were closed."""
        closed = 0
        for rem_id in await self.rt.repo.due_approvals(self.rt.clock()):
            rem = await self.rt.repo.get(rem_id)
            if rem is None:
                continue
            proceed = on_expiry(rem) == "continue"
            state = await self.rt.repo.expire_approval(rem_id, proceed=proceed)
            if state is None:
                continue
            closed += 1
            if not proceed:
                self.rt.metrics.remediations.labels(playbook=rem.playbook, outcome="expired").inc()
            if self.rt.notifier is not None:
                detail = (
                    "Nobody decided in time; the playbook says continue, so the step runs now."
                    if proceed
                    else "Nobody decided in time; the remediation was stopped."
                )
                await self.rt.notifier.remediation_event(rem_id, "expired", detail)
        return closed
