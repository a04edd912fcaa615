"""Approval requests: open one per gated step, decide once (compare-and-set), expire, list."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update

from remediator.store.models import (
    Approval,
    Remediation,
)
from remediator.store.unit_of_work import (
    RepositoryBase,
    _NotDecided,
)

__all__ = ["ApprovalStore"]


class ApprovalStore(RepositoryBase):
    """Approval requests (a mixin of `Repository`)."""

    async def list_approvals(
        self, *, decision: str | None = None, pending: bool = False, node: str | None = None,
        remediation_id: str | None = None, limit: int = 100,
    ) -> list[tuple[Approval, Remediation]]:
        """Approval requests with their remediation, newest first; `pending`: not decided yet."""
        async with self.transaction() as session:
            query = select(Approval, Remediation).join(Remediation, Remediation.id == Approval.remediation_id)
            if pending:
                query = query.where(Approval.decision.is_(None))
            elif decision:
                query = query.where(Approval.decision == decision)
            if node:
                query = query.where(Remediation.node == node)
            if remediation_id:
                query = query.where(Approval.remediation_id == remediation_id)
            query = query.order_by(Approval.id.desc()).limit(limit)
            return [(a, r) for a, r in (await session.execute(query)).all()]

    async def due_approvals(self, now: datetime) -> list[str]:
        async with self.transaction() as session:
            rows = await session.scalars(
                select(Remediation.id).where(
                    Remediation.state == "awaiting_approval", Remediation.approval_expires_at.is_not(None),
                    Remediation.approval_expires_at < now,
                )
            )
            return list(rows.all())

    async def open_approval(
        self, rem_id: str, owner: str, *, step_index: int, step_name: str, token_hash: str,
        expires_at: datetime, requested_to: list[str], reason: str,
    ) -> Approval:
        """Stop the remediation in awaiting_approval and record the request, in one transaction."""
        now = self._clock()
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            await session.execute(
                update(Approval)
                .where(Approval.remediation_id == rem_id, Approval.decision.is_(None))
                .values(decision="superseded", decided_by="controller", decided_at=now, decision_source="controller")
            )
            await self._transition(
                session, rem, "await_approval", reason=reason,
                data={"step": step_name, "index": step_index, "expires_at": expires_at.isoformat()},
            )
            rem.approval_step = step_index
            rem.approval_expires_at = expires_at
            rem.approval_token_hash = token_hash
            rem.decision = None
            rem.decided_by = None
            rem.decided_at = None
            approval = Approval(
                remediation_id=rem_id, step_index=step_index, step_name=step_name, token_hash=token_hash,
                created_at=now, expires_at=expires_at, requested_to=list(requested_to), decision=None,
                decided_by=None, decided_at=None, decision_source=None,
            )
            session.add(approval)
            await session.flush()
            await self.audit(
                session, "approval.requested", remediation_id=rem_id,
                data={"approval_id": approval.id, "step": step_name, "index": step_index,
                      "expires_at": expires_at.isoformat(), "requested_to": list(requested_to)},
            )
            return approval

    async def approval_by_token_hash(self, token_hash: str) -> tuple[Approval, Remediation] | None:
        async with self.transaction() as session:
            approval = await session.scalar(select(Approval).where(Approval.token_hash == token_hash))
            if approval is None:
                return None
            rem = await session.get(Remediation, approval.remediation_id)
            return (approval, rem) if rem is not None else None

    async def approvals_of(self, rem_id: str) -> list[Approval]:
        """Every approval request of a remediation, oldest first."""
        async with self.transaction() as session:
            rows = await session.scalars(
                select(Approval).where(Approval.remediation_id == rem_id).order_by(Approval.id)
            )
            return list(rows.all())

    async def get_approval(self, approval_id: int) -> Approval | None:
        async with self.transaction() as session:
            return await session.get(Approval, approval_id)

    async def decide_approval(
        self, approval_id: int, *, decision: str, actor: str, source: str, comment: str | None = None,
    ) -> bool:
        """Record a human decision exactly once (compare-and-set) with its transition and audit event.

        Returns False, changing nothing, when the request was already decided, has expired, or the
        remediation is no longer waiting for this step.
        """
        if decision not in ("approved", "rejected"):
            raise ValueError(f"decision must be approved or rejected, not {decision!r}")
        now = self._clock()
        try:
            async with self.transaction() as session:
                claimed = await session.execute(
                    update(Approval)
                    .where(Approval.id == approval_id, Approval.decision.is_(None), Approval.expires_at > now)
                    .values(decision=decision, decided_by=actor, decided_at=now, decision_source=source)
                )
                if not claimed.rowcount:  # type: ignore[attr-defined]
                    return False
                approval = await session.get(Approval, approval_id)
                assert approval is not None
                moved = await session.execute(
                    update(Remediation)
                    .where(
                        Remediation.id == approval.remediation_id, Remediation.state == "awaiting_approval",
                        Remediation.decision.is_(None), Remediation.approval_step == approval.step_index,
                    )
                    .values(decision=decision, decided_by=actor, decided_at=now)
                )
                if not moved.rowcount:  # type: ignore[attr-defined]
                    raise _NotDecided
                rem = await session.get(Remediation, approval.remediation_id, populate_existing=True)
                assert rem is not None
                event = "approve" if decision == "approved" else "reject"
                await self._transition(
                    session, rem, event, actor=actor,
                    reason=f"{decision} by {actor}" + (f": {comment}" if comment else ""),
                    data={"approval_id": approval_id, "step": approval.step_name,
                          "index": approval.step_index, "decided_by": actor, "source": source, "comment": comment},
                )
                if decision == "approved":
                    rem.next_run_at = now
                return True
        except _NotDecided:
            return False

    async def expire_approval(self, rem_id: str, *, proceed: bool) -> str | None:
        """Close an overdue request: the remediation expires, or with `proceed` runs the step as approved.

        Compare-and-set like `decide_approval`, so a human decision racing the expiry wins or loses whole.
        Returns the new state, or None when there was nothing (any more) to expire.
        """
        now = self._clock()
        async with self.transaction() as session:
            moved = await session.execute(
                update(Remediation)
                .where(
                    Remediation.id == rem_id, Remediation.state == "awaiting_approval",
                    Remediation.decision.is_(None), Remediation.approval_expires_at < now,
                )
                .values(
                    decision="approved" if proceed else "expired", decided_by="controller", decided_at=now
                )
            )
            if not moved.rowcount:  # type: ignore[attr-defined]
                return None
            rem = await session.get(Remediation, rem_id, populate_existing=True)
            assert rem is not None
            approvals = list((await session.scalars(
                select(Approval).where(Approval.remediation_id == rem_id, Approval.decision.is_(None))
            )).all())
            for approval in approvals:
                approval.decision = "expired"
                approval.decided_by = "controller"
                approval.decided_at = now
                approval.decision_source = "expiry"
            step = approvals[-1].step_name if approvals else None
            await self.audit(
                session, "approval.expired", remediation_id=rem_id,
                data={"step": step, "index": rem.approval_step,
                      "on_expiry": "continue" if proceed else "abort"},
            )
            if proceed:
                await self._transition(
                    session, rem, "approve", reason="approval not given in time; the playbook says continue",
                    data={"step": step, "index": rem.approval_step, "on_expiry": "continue"},
                )
                rem.next_run_at = now
            else:
                await self._transition(session, rem, "expire", reason="approval not given in time",
                                       data={"step": step, "index": rem.approval_step})
            return rem.state
