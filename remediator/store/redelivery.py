"""A still-firing alert delivered again after its remediation ended without running is decided again.

Alertmanager sends a firing alert again with the same fingerprint and startsAt (every repeat_interval, and
after a webhook answered 5xx); the intake stores such a delivery as a repeat, which is never decided
(store/intake_store.py). That is right while the alert's remediation runs, and after one that ran: it
succeeded, or the playbook failed it (a step's permanent failure, a gate), or a guardrail held it. It is not
right after a remediation that ended `failed` without running: the driver's crashes ended it, or a permanent
error kept its context from being read before any step (`ended_without_running`). The cooldown does not
count such a remediation either (store/decision_store.py, store/remediation_store.py).

So when a repeat arrives for an alert whose first delivery was decided (`done`) and whose remediation (the
one it started or was linked to) ended that way, and that alert has not been resolved, the first delivery
is put back to `new`: a worker claims it and decides it as any new alert (silences, rules, active keys,
guardrails at admission), and `alert.redelivered` ("re-delivered after <reason>: deciding again") is audited
on the remediation that ended. The update is conditional on the row still being `done` for that
remediation, so deliveries at once (an HA Alertmanager pair, a retry racing the original, several replicas
on PostgreSQL, where the second update waits for the first's row lock and then finds the row `new`) put it
back once; after the new decision a later repeat reads the new remediation. At most one new decision per
repeat, and none after a remediation that ran.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from sqlalchemy import ColumnElement, and_, func, or_, select, update

from remediator.retrying import CONTEXT_READ_FAILED
from remediator.store.models import AlertRow, Remediation
from remediator.store.unit_of_work import RepositoryBase

__all__ = ["decide_again", "ended_without_running"]

log = logging.getLogger(__name__)

_CHUNK = 500


def ended_without_running() -> ColumnElement[bool]:
    """A remediation ended `failed` by the driver's crashes, or by a permanent error reading its context before
    any step: not by a decision of its playbook."""
    return and_(
        Remediation.state == "failed",
        or_(
            Remediation.crashes > 0,
            func.coalesce(Remediation.state_reason, "").startswith(CONTEXT_READ_FAILED, autoescape=True),
        ),
    )


async def decide_again(repo: RepositoryBase, originals: Collection[int]) -> list[int]:
    """Put back to `new` those of `originals` (first deliveries of which a repeat was just stored) whose
    remediation ended without running; returns their ids. A read beside the writer first: nearly always
    there is none, and the webhook's intake then writes nothing more."""
    wanted = sorted(set(originals))
    if not wanted:
        return []
    found: list[tuple[int, str, str | None]] = []
    async with repo.reading() as session:
        for i in range(0, len(wanted), _CHUNK):
            rows = await session.execute(
                select(AlertRow.id, Remediation.id, Remediation.state_reason)
                .join(Remediation, Remediation.id == AlertRow.remediation_id)
                .where(
                    AlertRow.id.in_(wanted[i : i + _CHUNK]), AlertRow.state == "done", AlertRow.status == "firing",
                    Remediation.finished_at.is_not(None), Remediation.alert_resolved.is_(False),
                    ended_without_running(),
                )
            )
            found.extend((int(a), str(r), reason) for a, r, reason in rows.all())
    if not found:
        return []
    reopened: list[int] = []
    async with repo.transaction(intake=True) as session:
        for alert_id, rem_id, reason in found:
            why = f"re-delivered after {reason or 'its remediation crashed'}: deciding again"
            back = await session.scalar(
                update(AlertRow)
                .where(AlertRow.id == alert_id, AlertRow.state == "done", AlertRow.remediation_id == rem_id)
                .values(state="new", outcome=None, note=why, claimed_by=None, claim_expires=None)
                .returning(AlertRow.id)
            )
            if back is None:  # another delivery put it back first, or it was decided again meanwhile
                continue
            reopened.append(alert_id)
            await repo.audit(session, "alert.redelivered", remediation_id=rem_id,
                             data={"alert_id": alert_id, "reason": why, "ended": reason})
    for alert_id in reopened:
        log.info("alert %s re-delivered after its remediation ended without running: deciding again", alert_id)
    return reopened
