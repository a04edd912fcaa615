"""Start-up of a sole controller: free the claims and leases a crashed predecessor left behind.

While this process holds the exclusive replica guard no other controller is alive on the database, so
every alert claim and remediation lease still recorded belongs to a dead process. Freeing them at once
lets a restarted controller pick up acknowledged alerts and running remediations immediately instead of
waiting for the leases to expire; the remediation resumes at the step in flight as after any crash.
"""

from __future__ import annotations

from sqlalchemy import update

from remediator.store.models import AlertRow, Remediation
from remediator.store.repository import Repository

__all__ = ["free_dead_claims"]


async def free_dead_claims(repo: Repository, owner: str) -> tuple[int, int]:
    """(alerts, remediations) released; audited as `replica.takeover` when there were any."""
    async with repo.transaction() as session:
        alerts = await session.execute(
            update(AlertRow).where(AlertRow.state == "new", AlertRow.claim_expires.is_not(None))
            .values(claimed_by=None, claim_expires=None)
        )
        rems = await session.execute(
            update(Remediation).where(Remediation.lease_owner.is_not(None))
            .values(lease_owner=None, lease_expires=None)
        )
        counts = int(alerts.rowcount), int(rems.rowcount)  # type: ignore[attr-defined]
        if any(counts):
            await repo.audit(session, "replica.takeover", data={
                "owner": owner, "alert_claims_freed": counts[0], "remediation_leases_freed": counts[1],
            })
    return counts
