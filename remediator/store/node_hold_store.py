"""The store's side of what the node watch sees on a held node: a hand change that lets a remediation go, and
a reboot that makes the remediations waiting for it due at once (engine/hand_changes.py)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select, true, update

from remediator.domain.states import Event, State
from remediator.store.models import Remediation
from remediator.store.transactions import RepositoryBase

__all__ = ["NodeHoldStore"]

# Final states in which the controller holds nothing on the node whatever its steps did.
_LET_GO = (State.REVERTED, State.RETURNED, State.RELEASED, State.PLANNED)


class NodeHoldStore(RepositoryBase):
    """Remediations holding a node, their release by hand, and the reboot wake-up (a mixin of `Repository`)."""

    async def holding_node(self, node: str) -> list[Remediation]:
        """Remediations that may hold `node` under the controller's quarantine (counted by the breaker), oldest
        first."""
        async with self.reading() as session:
            rows = await session.scalars(
                select(Remediation)
                .where(Remediation.node == node, Remediation.quarantined == true(), Remediation.state.not_in(_LET_GO))
                .order_by(Remediation.created_at)
            )
            return list(rows.all())

    async def holding_nodes(self) -> list[Remediation]:
        """Every remediation that may hold its node under the controller's quarantine, oldest first: what the
        hand-change reconcile compares with the nodes' marks (at start-up, after a relist, on bookmarks)."""
        async with self.reading() as session:
            rows = await session.scalars(
                select(Remediation)
                .where(Remediation.node.is_not(None), Remediation.quarantined == true(),
                       Remediation.state.not_in(_LET_GO))
                .order_by(Remediation.created_at)
            )
            return list(rows.all())

    async def release_by_hand(
        self, rem_id: str, *, expected_state: str, reason: str, actor: str, data: Mapping[str, object]
    ) -> Remediation | None:
        """Record the hand change (`node.changed_by_hand`) and move the remediation to `released`, its node no
        longer counted quarantined, in one transaction. None when it moved meanwhile (another replica released
        it, or its own undo went on): the caller looks again."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, None)
            if rem.state != expected_state or not rem.quarantined:
                return None
            await self.audit(session, "node.changed_by_hand", remediation_id=rem.id, actor=actor, data=data)
            await self._transition(session, rem, Event.HAND_CHANGED, reason=reason, actor=actor, data=data)
            rem.quarantined = False
            return rem

    async def wake_after_reboot(self, node: str) -> int:
        """Make the remediations on `node` that wait on a timer (a return gate waiting for the reboot, a forward
        step looking again later) due now; those another driver holds are left to it. Returns how many."""
        now = self.clock()
        async with self.transaction() as session:
            result = await session.execute(
                update(Remediation)
                .where(
                    Remediation.node == node, Remediation.state.in_(("reverting", "running")),
                    Remediation.lease_owner.is_(None), Remediation.next_run_at > now,
                )
                .values(next_run_at=now)
            )
            return int(result.rowcount)  # type: ignore[attr-defined]
