"""A person's group decision on a storm (engine/storm_guard.py): approve releases every remediation it holds,
reject cancels them; one decision, audited with who and why, whatever the number of nodes. The API, the CLI
(through the API), the storm page and the approve-group link all decide here, and a page first says what the
decision will do (`describe_decision`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from remediator.domain.storms import nodes_phrase
from remediator.engine.overrides import cancel
from remediator.engine.runtime import Runtime
from remediator.errors import IllegalTransition
from remediator.store.storm_records import HeldRemediation, StormRecord

__all__ = [
    "DECISIONS", "DecisionSaid", "StormCancelled", "StormDecided", "StormReleased", "decide_storm", "describe_decision",
]

log = logging.getLogger(__name__)

DECISIONS = {"approve": "approved", "reject": "rejected"}  # a form's or a URL's verb -> the storm's state


@dataclass(frozen=True)
class DecisionSaid:
    """What a group decision will do, in words, before it is made (the storm page's confirmation)."""

    headline: str  # 'Release 7 held remediations on nodes running driver 580.95.05'
    details: tuple[str, ...]
    held: tuple[HeldRemediation, ...]  # the remediations it holds now


class StormReleased(StormRecord):
    """The storm after its approval, with the remediations it released (ids)."""

    released: list[str]


class StormCancelled(StormRecord):
    """The storm after its rejection, with the remediations it cancelled (ids)."""

    cancelled: list[str]


StormDecided = StormReleased | StormCancelled


def _count(n: int) -> str:
    return f"{n} held remediation{'' if n == 1 else 's'}"


async def describe_decision(rt: Runtime, storm_id: str, decision: str, *, actor: str) -> DecisionSaid | None:
    """What approving (`approved`) or rejecting (`rejected`) the storm would do now; None: no such storm.
    Changes nothing."""
    if decision not in ("approved", "rejected"):
        raise ValueError(f"decision must be approved or rejected, not {decision!r}")
    storm = await rt.repo.get_storm(storm_id)
    if storm is None:
        return None
    held = tuple((await rt.repo.storm_holds([storm_id])).get(storm_id, []))
    phrase = nodes_phrase(storm["cause"]["key"], storm["cause"]["value"])
    who = f"Recorded in the audit log as decided by {actor}."
    if decision == "approved":
        return DecisionSaid(
            f"Release {_count(len(held))} on {phrase}",
            ("Each goes on from where it was held; the other guardrails (circuit breaker, pauses, rate limits) "
             "still apply.", f"Later remediations on {phrase} are not held by this storm.", who),
            held,
        )
    return DecisionSaid(
        f"Cancel {_count(len(held))} on {phrase}",
        ("Each ends cancelled where it was held; nothing it has not done is done.",
         f"Later remediations on {phrase} wait for a person.", who),
        held,
    )


async def decide_storm(rt: Runtime, storm_id: str, decision: str, *, actor: str, reason: str | None
                       ) -> StormDecided | None:
    """Approve or reject the storm; None when there is no such storm. The record says what was released or
    cancelled (`released` / `cancelled`: remediation ids)."""
    record, held = await rt.repo.decide_storm(storm_id, decision, actor=actor, reason=reason)
    if record is None:
        return None
    if decision == "approved":
        if held:
            await rt.repo.wake_held()  # re-admitted now: the storm no longer holds them, the other guardrails do
        out: StormDecided = StormReleased(**record, released=held)
    else:
        cancelled: list[str] = []
        for rem_id in held:
            try:
                await cancel(rt, rem_id, actor=actor, reason=f"storm {storm_id} rejected: {reason}")
                cancelled.append(rem_id)
            except IllegalTransition:  # a person or the alert's resolution moved it on meanwhile
                log.info("storm %s: remediation %s was no longer held", storm_id, rem_id)
        out = StormCancelled(**record, cancelled=cancelled)
    if rt.notifier is not None and record["state"] == decision:
        rt.notifier.storm_event(storm_id)  # its Slack message says who decided, without the approve link
    return out
