"""A person's group decision on a storm (engine/storm_guard.py): approve releases every remediation it holds,
reject cancels them; one decision, audited with who and why, whatever the number of nodes."""

from __future__ import annotations

import logging
from typing import Any

from remediator.engine.overrides import cancel
from remediator.engine.runtime import Runtime
from remediator.errors import IllegalTransition

__all__ = ["decide_storm"]

log = logging.getLogger(__name__)


async def decide_storm(rt: Runtime, storm_id: str, decision: str, *, actor: str, reason: str | None
                       ) -> dict[str, Any] | None:
    """Approve or reject the storm; None when there is no such storm. The record says what was released or
    cancelled (`released` / `cancelled`: remediation ids)."""
    record, held = await rt.repo.decide_storm(storm_id, decision, actor=actor, reason=reason)
    if record is None:
        return None
    if decision == "approved":
        if held:
            await rt.repo.wake_held()  # re-admitted now: the storm no longer holds them, the other guardrails do
        return {**record, "released": held}
    cancelled: list[str] = []
    for rem_id in held:
        try:
            await cancel(rt, rem_id, actor=actor, reason=f"storm {storm_id} rejected: {reason}")
            cancelled.append(rem_id)
        except IllegalTransition:  # a person or the alert's resolution moved it on meanwhile
            log.info("storm %s: remediation %s was no longer held", storm_id, rem_id)
    return {**record, "cancelled": cancelled}
