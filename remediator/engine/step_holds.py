"""What stops a remediation's next step before it runs: the kill switch, a scoped pause, the opt-out label.

Read right before a forward step (a step that changes something waits while the controller or a pause scoped
to it holds; the opt-out label, read from the node now, holds every step) and before a mutating undo step.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from remediator.domain.pauses import held_by
from remediator.engine.runtime import Runtime
from remediator.errors import ActionError
from remediator.kube.views import Body
from remediator.kube.vocabulary import EXCLUDE_LABEL, excluded
from remediator.store.flag_store import PAUSE_FLAG
from remediator.store.models import Remediation

__all__ = ["held_by_pause", "hold", "live_labels", "paused"]

log = logging.getLogger(__name__)


async def paused(rt: Runtime) -> bool:
    """Is the controller's kill switch on?"""
    flag = await rt.repo.get_flag(PAUSE_FLAG)
    return bool(flag and flag.get("paused"))


async def live_labels(rt: Runtime, rem: Remediation) -> dict[str, str] | None:
    """The node's labels as they are now (one read), else those of the context read; None without a node."""
    if not rem.node:
        return None
    if rt.kube is not None:
        try:
            node = await rt.kube.get_node(rem.node)
            return Body(node).labels
        except ActionError as exc:
            log.info("remediation %s: reading node %s's labels failed (%s); using the context's", rem.id,
                     rem.node, exc)
    return _labels(rem.context.get("node"))


def _labels(holder: object) -> dict[str, str]:
    """The `labels` of a node's metadata (or of a context's node), as strings; {} when there are none."""
    labels = holder.get("labels") if isinstance(holder, Mapping) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


async def held_by_pause(rt: Runtime, rem: Remediation) -> bool:
    """Does the kill switch, or a pause scoped to this remediation's node or playbook, hold it now?"""
    if await paused(rt):
        return True
    return held_by(await rt.repo.active_pauses(), rem.node, await live_labels(rt, rem), rem.playbook) is not None


async def hold(rt: Runtime, rem: Remediation, mutating: bool) -> tuple[str, str] | None:
    """Before a forward step: (reason, guardrail) when it must wait. The kill switch and the scoped pauses hold
    a step that changes something; the opt-out label, read from the node now, holds every step."""
    if mutating and await paused(rt):
        return "controller is paused", "paused"
    labels = await live_labels(rt, rem)
    if labels is not None and excluded(labels):
        return f"node {rem.node} is labelled {EXCLUDE_LABEL}=true (opted out)", "opt_out"
    if mutating:
        scoped = held_by(await rt.repo.active_pauses(), rem.node, labels, rem.playbook)
        if scoped is not None:
            return scoped.describe(), "paused"
    return None
