"""Approval requests: open one per gated step, decide once (compare-and-set), expire, list."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from remediator.domain.states import Event, State
from remediator.errors import StateMoved
from remediator.store.models import (
    Approval,
    Remediation,
)
from remediator.store.transactions import RepositoryBase

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
        """Remediations waiting on a request that is still open after its expiry time (read beside the writer:
        the worker asks every poll interval)."""
        async with self.reading() as session:
            rows = await session.scalars(
                select(Approval.remediation_id)
                .join(Remediation, Remediation.id == Approval.remediation_id)
                .where(
                    Remediation.state == State.AWAITING_APPROVAL, Approval.decision.is_(None),
                    Approval.expires_at < now,
                )
            )
            return list(rows.all())

    async def open_approval(
        self, rem_id: str, owner: str, *, step_index: int, step_name: str, token_hash: str,
        expires_at: datetime, requested_to: list[str], reason: str,
    ) -> Approval:
        """Stop the remediation in awaiting_approval and record the request, in one transaction.

        A request left open by an earlier wait is closed as `superseded`, so a remediation has at most one
        open request: the one it waits for while `awaiting_approval`.
        """
        now = self.clock()
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            if rem.state != State.RUNNING:  # cancelled or returned since the driver read it: nothing to ask
                raise StateMoved(rem_id)
            await session.execute(
                update(Approval)
                .where(Approval.remediation_id == rem_id, Approval.decision.is_(None))
                .values(decision="superseded", decided_by="controller", decided_at=now, decision_source="controller")
            )
            await self._transition(
                session, rem, Event.AWAIT_APPROVAL, reason=reason,
                data={"step": step_name, "index": step_index, "expires_at": expires_at.isoformat()},
            )
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

    async def current_approval(self, rem_id: str) -> Approval | None:
        """The newest approval request of a remediation (its open one while it is awaiting_approval)."""
        async with self.transaction() as session:
            return await session.scalar(
                select(Approval).where(Approval.remediation_id == rem_id).order_by(Approval.id.desc()).limit(1)
            )

    async def get_approval(self, approval_id: int) -> Approval | None:
        async with self.transaction() as session:
            return await session.get(Approval, approval_id)

    async def decide_approval(
        self, approval_id: int, *, decision: str, actor: str, source: str, comment: str | None = None,
    ) -> bool:
        """Record a human decision exactly once (compare-and-set) with its transition and audit event.

        Returns False, changing nothing, when the request was already decided, has expired, or the
        remediation is no longer waiting for it.
        """
        if decision not in ("approved", "rejected"):
            raise ValueError(f"decision must be approved or rejected, not {decision!r}")
        now = self.clock()
        async with self.transaction() as session:
            approval = await session.get(Approval, approval_id)
            if approval is None:
                return False
            rem = await self._get_for_update(session, approval.remediation_id, None)
            if not await self._close_request(
                session, approval_id, decision=decision, actor=actor, source=source, now=now, due=False
            ):
                return False
            event = Event.APPROVE if decision == "approved" else Event.REJECT
            await self._transition(
                session, rem, event, actor=actor,
                reason=f"{decision} by {actor}" + (f": {comment}" if comment else ""),
                data={"approval_id": approval_id, "step": approval.step_name,
                      "index": approval.step_index, "decided_by": actor, "source": source, "comment": comment},
            )
            if decision == "approved":
                rem.next_run_at = now
            return True

    async def expire_approval(self, rem_id: str, *, proceed: bool) -> str | None:
        """Close an overdue request: the remediation expires, or with `proceed` runs the step as approved.

        The same compare-and-set as `decide_approval`, so a human decision racing the expiry wins or loses
        whole. The request is recorded `expired` either way; what that meant is the playbook's `on_expiry`.
        Returns the new state, or None when there was nothing (any more) to expire.
        """
        now = self.clock()
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, None)
            approval = await session.scalar(
                select(Approval).where(Approval.remediation_id == rem_id, Approval.decision.is_(None))
            )
            if approval is None or not await self._close_request(
                session, approval.id, decision="expired", actor="controller", source="expiry", now=now, due=True
            ):
                return None
            step, index = approval.step_name, approval.step_index
            await self.audit(
                session, "approval.expired", remediation_id=rem_id,
                data={"step": step, "index": index, "on_expiry": "continue" if proceed else "abort"},
            )
            if proceed:
                await self._transition(
                    session, rem, Event.APPROVE, reason="approval not given in time; the playbook says continue",
                    data={"step": step, "index": index, "on_expiry": "continue"},
                )
                rem.next_run_at = now
            else:
                await self._transition(session, rem, Event.EXPIRE, reason="approval not given in time",
                                       data={"step": step, "index": index})
            return rem.state

    async def _close_request(
        self, session: AsyncSession, approval_id: int, *, decision: str, actor: str, source: str, now: datetime,
        due: bool,
    ) -> bool:
        """The compare-and-set every decision goes through: record `decision` on the request only while it is
        open, its remediation waits for it, and it has not expired (`due`: only once it has). True when this
        call decided it.

        The caller holds the remediation's row lock (PostgreSQL), so on a server with several replicas the
        check of the remediation's state here sees any move that committed first (a cancel, another decision).
        """
        waiting = select(Remediation.id).where(
            Remediation.id == Approval.remediation_id, Remediation.state == State.AWAITING_APPROVAL
        )
        in_time = Approval.expires_at < now if due else Approval.expires_at > now
        closed = await session.execute(
            update(Approval)
            .where(Approval.id == approval_id, Approval.decision.is_(None), in_time, waiting.exists())
            .values(decision=decision, decided_by=actor, decided_at=now, decision_source=source)
            .execution_options(synchronize_session=False)
        )
        return bool(closed.rowcount)  # type: ignore[attr-defined]
