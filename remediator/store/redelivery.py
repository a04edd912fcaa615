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

The same holds for an alert a silence held (outcome `silenced`, the note naming the silence; no remediation).
Alertmanager notifies a still-firing alert again once its silence ends; the controller's silences are its
own, so Alertmanager goes on sending the alert, and its repeats are the controller's cue. A repeat of such a
first delivery, still firing and not resolved since (no resolved delivery of its fingerprint stored after
it), that no silence in force matches any more (the silence expired by time or by `expire`/DELETE) puts it
back to `new` the same way, conditional on the row still being `done`, `silenced`, with the same note;
audited as `alert.redelivered` ("silence <id> ended: deciding again", no remediation). While a silence
still matches, the repeat stays a repeat. The silences in force are read only when a repeat's first
delivery was silenced, in the same read, and matched as the worker matches them (silencing.SilenceSet, its
patterns compiled once and cached).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, exists, func, or_, select, update
from sqlalchemy.orm import aliased

from remediator.domain.json_values import JsonObject
from remediator.domain.silences import SilenceSet, silence_id_of
from remediator.domain.states import State
from remediator.retrying import CONTEXT_READ_FAILED
from remediator.store.models import AlertRow, Remediation
from remediator.store.silence_store import active_silences_in
from remediator.store.transactions import RepositoryBase

__all__ = ["decide_again", "ended_without_running"]

log = logging.getLogger(__name__)

_CHUNK = 500


def ended_without_running() -> ColumnElement[bool]:
    """A remediation ended `failed` by the driver's crashes, or by a permanent error reading its context before
    any step: not by a decision of its playbook."""
    return and_(
        Remediation.state == State.FAILED,
        or_(
            Remediation.crashes > 0,
            func.coalesce(Remediation.state_reason, "").startswith(CONTEXT_READ_FAILED, autoescape=True),
        ),
    )


@dataclass(frozen=True)
class _Ended:
    """A first delivery to decide again: after its remediation (`rem_id`) ended without running, or after the
    silence that held it (`note` names it) ended."""

    alert_id: int
    rem_id: str | None
    reason: str | None  # the remediation's state_reason
    note: str | None  # the silenced alert's note


def _silenced_unresolved() -> ColumnElement[bool]:
    """A first delivery a silence held, of which no resolved delivery (same fingerprint) was stored since."""
    later = aliased(AlertRow)
    return and_(
        AlertRow.outcome == "silenced", AlertRow.remediation_id.is_(None),
        ~exists().where(later.fingerprint == AlertRow.fingerprint, later.status == "resolved", later.id > AlertRow.id),
    )


async def decide_again(repo: RepositoryBase, originals: Collection[int]) -> list[int]:
    """Put back to `new` those of `originals` (first deliveries of which a repeat was just stored) whose
    remediation ended without running, or whose silence ended and that no silence in force matches now;
    returns their ids. A read beside the writer first: nearly always there is none, and the webhook's intake
    then writes nothing more."""
    wanted = sorted(set(originals))
    if not wanted:
        return []
    found: list[_Ended] = []
    async with repo.reading() as session:
        silenced: list[tuple[int, str | None, dict[str, str]]] = []
        for i in range(0, len(wanted), _CHUNK):
            rows = await session.execute(
                select(AlertRow.id, AlertRow.outcome, AlertRow.note, AlertRow.labels, Remediation.id,
                       Remediation.state_reason)
                .outerjoin(Remediation, Remediation.id == AlertRow.remediation_id)
                .where(
                    AlertRow.id.in_(wanted[i : i + _CHUNK]), AlertRow.state == "done", AlertRow.status == "firing",
                    or_(
                        and_(Remediation.finished_at.is_not(None), Remediation.alert_resolved.is_(False),
                             ended_without_running()),
                        _silenced_unresolved(),
                    ),
                )
            )
            for alert_id, outcome, note, labels, rem_id, reason in rows.all():
                if rem_id is None and outcome == "silenced":
                    silenced.append((int(alert_id), note, dict(labels or {})))
                elif rem_id is not None:
                    found.append(_Ended(int(alert_id), str(rem_id), reason, None))
        if silenced:  # only now: the silences in force, matched as the worker matches them
            holding = SilenceSet(await active_silences_in(session, repo.clock()))
            found.extend(_Ended(a, None, None, note) for a, note, labels in silenced
                         if not (holding and holding.match(labels)))
    if not found:
        return []
    reopened: list[int] = []
    async with repo.transaction(intake=True) as session:
        for ended in found:
            still: tuple[ColumnElement[bool], ...]
            if ended.rem_id is None:
                silence_id = silence_id_of(ended.note) or "?"
                why = f"silence {silence_id} ended: deciding again"
                still = (AlertRow.outcome == "silenced", AlertRow.remediation_id.is_(None),
                         AlertRow.note == ended.note if ended.note is not None else AlertRow.note.is_(None))
                data: JsonObject = {"alert_id": ended.alert_id, "reason": why, "silence_id": silence_id}
            else:
                why = f"re-delivered after {ended.reason or 'its remediation crashed'}: deciding again"
                still = (AlertRow.remediation_id == ended.rem_id,)
                data = {"alert_id": ended.alert_id, "reason": why, "ended": ended.reason}
            back = await session.scalar(
                update(AlertRow)
                .where(AlertRow.id == ended.alert_id, AlertRow.state == "done", *still)
                .values(state="new", outcome=None, note=why, claimed_by=None, claim_expires=None)
                .returning(AlertRow.id)
            )
            if back is None:  # another delivery put it back first, or it was decided again meanwhile
                continue
            reopened.append(ended.alert_id)
            await repo.audit(session, "alert.redelivered", remediation_id=ended.rem_id, data=data)
            log.info("alert %s: %s", ended.alert_id, why)
    return reopened
