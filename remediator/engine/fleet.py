"""The fleet at a glance: which nodes and GPUs the controller has taken out of service or changed, and how
much room the circuit breaker leaves.

Built from the store only (remediations, their steps, the guardrail status), so it shows what the controller
did and holds, never a live read of the cluster. A node is `quarantined` while a remediation holds it under
quarantine; a GPU is `capped` while a `power_limit` step of a remediation that has not been reverted has no
later `restore_power_limit`; `awaiting approval` and `held` are remediation states; `recent` is anything
created or finished within the window (24 hours by default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from remediator.engine.guardrail_status import guardrail_status
from remediator.engine.runtime import Runtime
from remediator.store.models import Remediation

__all__ = ["Fleet", "NodeRow", "fleet_view"]

CAP_ACTION = "power_limit"
UNCAP_ACTION = "restore_power_limit"


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass
class NodeRow:
    """One node with everything the controller holds or did on it."""

    node: str
    quarantined: list[Remediation] = field(default_factory=list)
    capped_gpus: dict[str, Remediation] = field(default_factory=dict)
    awaiting: list[Remediation] = field(default_factory=list)
    held: list[Remediation] = field(default_factory=list)
    recent: list[Remediation] = field(default_factory=list)

    @property
    def flags(self) -> list[str]:
        names = [("quarantined", self.quarantined), ("capped", self.capped_gpus), ("awaiting approval", self.awaiting),
                 ("held", self.held), ("recently remediated", self.recent)]
        return [name for name, items in names if items]


@dataclass
class Fleet:
    nodes: list[NodeRow]
    counts: dict[str, int]
    headroom: dict[str, Any]
    window: timedelta
    guardrails: dict[str, Any]


def _gpu_of(rem: Remediation) -> str:
    return rem.gpu_uuid or (f"#{rem.gpu_index}" if rem.gpu_index else "") or "all GPUs"


async def fleet_view(rt: Runtime, *, window: timedelta = timedelta(hours=24)) -> Fleet:
    now = _aware(rt.repo._clock()) or datetime.now(UTC)
    since = now - window
    rems = await rt.repo.fleet_remediations(since)
    by_id = {r.id: r for r in rems}
    nodes: dict[str, NodeRow] = {}

    def row_for(rem: Remediation) -> NodeRow:
        name = rem.node or rem.namespace or rem.target_key
        return nodes.setdefault(name, NodeRow(name))

    for rem in rems:
        if rem.quarantined:
            row_for(rem).quarantined.append(rem)
        if rem.state == "awaiting_approval":
            row_for(rem).awaiting.append(rem)
        elif rem.state == "held":
            row_for(rem).held.append(rem)
        created, finished = _aware(rem.created_at), _aware(rem.finished_at)
        if (created is not None and created >= since) or (finished is not None and finished >= since):
            row_for(rem).recent.append(rem)

    # Power caps in force: the last cap/uncap step per remediation decides.
    last: dict[str, str] = {}
    for step in await rt.repo.steps_with_actions((CAP_ACTION, UNCAP_ACTION)):
        if step.status == "succeeded":
            last[step.remediation_id] = step.action
    capped_ids = [rem_id for rem_id, action in last.items() if action == CAP_ACTION]
    missing = [i for i in capped_ids if i not in by_id]
    by_id.update(await rt.repo.get_remediations(missing) if missing else {})
    capped_gpus = 0
    for rem_id in capped_ids:
        capping = by_id.get(rem_id)
        if capping is None or capping.state in ("reverted", "reverting"):
            continue
        row = row_for(capping)
        if _gpu_of(capping) not in row.capped_gpus:
            capped_gpus += 1
        row.capped_gpus[_gpu_of(capping)] = capping

    status = await guardrail_status(rt)
    breaker = status["circuit_breaker"]
    limit, used = int(breaker["limit"]), int(breaker["quarantined"])
    rate = status["rate_limit"]
    headroom = {
        "quarantined": used,
        "limit": limit,
        "allowed": max(0, limit - used),
        "tripped": bool(breaker["tripped"]),
        "gpu_nodes": breaker["gpu_nodes"],
        "rate_recent": rate["recent"],
        "rate_limit": rate["limit"],
        "rate_window_seconds": rate["window"],
        "rate_allowed": max(0, int(rate["limit"]) - int(rate["recent"])) if rate["limit"] else None,
    }
    ordered = sorted(nodes.values(), key=lambda n: (not n.quarantined, not n.capped_gpus, not n.awaiting,
                                                    not n.held, n.node))
    counts = {
        "quarantined_nodes": sum(1 for n in ordered if n.quarantined),
        "capped_gpus": capped_gpus,
        "awaiting_approval": sum(len(n.awaiting) for n in ordered),
        "held": sum(len(n.held) for n in ordered),
        "recent": sum(len(n.recent) for n in ordered),
        "recent_nodes": sum(1 for n in ordered if n.recent),
    }
    return Fleet(nodes=ordered, counts=counts, headroom=headroom, window=window, guardrails=status)
