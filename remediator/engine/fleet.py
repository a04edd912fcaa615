"""The fleet at a glance: every GPU node with its GPUs' health, which nodes and GPUs the controller has taken
out of service or changed, how much room the circuit breaker leaves, and who paused the controller and why.

Nodes come from the node inventory (the list and watch the worker keeps, remediator/kube/inventory.py) and from the
remediations in the store. A node is `quarantined` when it carries the project's taint, or is cordoned while
a remediation holds it, as the inventory sees it now: a remediation that holds a node the taint has not
reached (not applied yet, taken off by hand, or a plan-only run that changes nothing) shows as `counted by
the breaker`, not as quarantined, and a node whose quarantine stays after its remediation ended is still
shown. Without an inventory (no cluster access, or before the first list) the remediations that hold a node
say it, except in plan-only mode, where nothing is ever tainted. A node name is shown only for a node the
inventory knows or one a remediation named by a node label; a name read from an `instance` label that no
node has (an IP and port, a scrape target) is not a node, and its remediation is listed apart.

A GPU is `capped` while a `power_limit` step of a remediation that has not been reverted has no later
`restore_power_limit`; `awaiting approval` and `held` are remediation states; `recent` is anything created or
finished within the window (24 hours by default). The breaker's headroom is MAX_QUARANTINED_NODES resolved
against the GPU nodes the inventory counts, and never more than the nodes left to quarantine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from remediator.domain.json_values import JsonObject
from remediator.domain.plan_snapshot import stored_alert_field
from remediator.domain.states import State
from remediator.engine.guardrail_status import guardrail_status
from remediator.engine.runtime import Runtime
from remediator.kube.inventory import NodeFacts, NodeInventory
from remediator.kube.vocabulary import QUARANTINE_TAINT
from remediator.store.models import Remediation

__all__ = ["Fleet", "NodeRow", "fleet_view", "gpu_health"]

CAP_ACTION = "power_limit"
UNCAP_ACTION = "restore_power_limit"


@dataclass
class NodeRow:
    """One node with everything the controller holds or did on it."""

    node: str
    # The remediations that hold the node under quarantine (the breaker counts the node for them).
    quarantined: list[Remediation] = field(default_factory=list)
    capped_gpus: dict[str, Remediation] = field(default_factory=dict)
    awaiting: list[Remediation] = field(default_factory=list)
    held: list[Remediation] = field(default_factory=list)
    recent: list[Remediation] = field(default_factory=list)
    facts: NodeFacts | None = None  # as the inventory sees the node now; None when it does not know it
    # Whether the holds alone say the node is quarantined (no inventory to read its taints from).
    holds_are_truth: bool = True

    @property
    def tainted(self) -> bool:
        return self.facts is not None and self.facts.tainted(QUARANTINE_TAINT)

    @property
    def quarantine_taints(self) -> list[str]:
        """The project's taints on the node (`key=value:effect`)."""
        if self.facts is None:
            return []
        return [t for t in self.facts.taints if t.split("=", 1)[0].split(":", 1)[0] == QUARANTINE_TAINT]

    @property
    def cordoned(self) -> bool:
        return self.facts is not None and self.facts.unschedulable

    @property
    def in_quarantine(self) -> bool:
        """Out of service by the controller's quarantine, as the node is now (see the module docstring)."""
        if self.facts is not None:
            return self.tainted or (self.cordoned and bool(self.quarantined))
        return self.holds_are_truth and bool(self.quarantined)

    @property
    def gpu_health(self) -> str:
        return gpu_health(self.facts)

    @property
    def flags(self) -> list[str]:
        names = [("quarantined", self.in_quarantine),
                 ("counted by the breaker", bool(self.quarantined) and not self.in_quarantine),
                 ("cordoned", self.cordoned and not self.in_quarantine),
                 ("GPU unhealthy", self.gpu_health == "unhealthy"),
                 ("capped", self.capped_gpus), ("awaiting approval", self.awaiting),
                 ("held", self.held), ("recently remediated", self.recent)]
        return [name for name, items in names if items]


def gpu_health(facts: NodeFacts | None) -> str:
    """`unhealthy` (GPUHealthy=False, or fewer GPUs allocatable than the node has), `healthy`, or `unknown`."""
    if facts is None or not facts.gpu:
        return "unknown"
    if facts.gpu_healthy == "False" or facts.gpus_allocatable < facts.gpus:
        return "unhealthy"
    return "healthy"


@dataclass
class Fleet:
    nodes: list[NodeRow]
    counts: dict[str, int]
    headroom: JsonObject
    window: timedelta
    guardrails: dict[str, Any]
    # Remediations whose target is not a known node (a namespace, a name from an `instance` label no node has).
    elsewhere: list[Remediation] = field(default_factory=list)
    inventory: bool = False  # whether the node inventory was read (else only the store speaks)


def _gpu_of(rem: Remediation) -> str:
    return rem.gpu_uuid or (f"#{rem.gpu_index}" if rem.gpu_index else "") or "all GPUs"


def _breaker_headroom(limit: int, used: int, gpu_nodes: int, setting: str) -> JsonObject:
    """The breaker's room against the real fleet: the limit MAX_QUARANTINED_NODES gives for `gpu_nodes` GPU
    nodes, and never more quarantines allowed than nodes left (10 allowed on a 3-node fleet is 3 at most)."""
    effective = min(limit, gpu_nodes) if gpu_nodes else limit
    return {"limit": limit, "effective_limit": effective, "allowed": max(0, effective - used),
            "limit_setting": setting, "fleet_known": bool(gpu_nodes)}


async def fleet_view(rt: Runtime, *, window: timedelta = timedelta(hours=24)) -> Fleet:
    now = rt.clock()
    since = now - window
    rems = await rt.repo.fleet_remediations(since)
    by_id = {r.id: r for r in rems}
    inventory = rt.inventory if rt.inventory is not None and rt.inventory.synced else None
    holds_are_truth = not (rt.kube is None and rt.plan_only)  # no cluster: nothing is ever tainted
    nodes: dict[str, NodeRow] = {}
    elsewhere: dict[str, Remediation] = {}

    def new_row(name: str) -> NodeRow:
        facts = inventory.get(name) if inventory is not None else None
        return NodeRow(name, facts=facts, holds_are_truth=holds_are_truth and inventory is None)

    if inventory is not None:  # every GPU node, and any node carrying the project's taint
        for name, facts in inventory.items():
            if facts.gpu or facts.tainted(QUARANTINE_TAINT):
                nodes[name] = new_row(name)

    def row_for(rem: Remediation) -> NodeRow | None:
        name = rem.node
        if not name or (name not in nodes and not _names_a_node(rem, inventory)):
            elsewhere.setdefault(rem.id, rem)
            return None
        if name not in nodes:
            nodes[name] = new_row(name)
        return nodes[name]

    for rem in rems:
        if rem.quarantined and (row := row_for(rem)) is not None:
            row.quarantined.append(rem)
        if rem.state in (State.AWAITING_APPROVAL, State.HELD) and (row := row_for(rem)) is not None:
            (row.awaiting if rem.state == State.AWAITING_APPROVAL else row.held).append(rem)
        created, finished = rem.created_at, rem.finished_at
        if ((created is not None and created >= since) or (finished is not None and finished >= since)) and (
            row := row_for(rem)
        ) is not None:
            row.recent.append(rem)

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
        if capping is None or capping.state in (State.REVERTED, State.REVERTING):
            continue
        row = row_for(capping)
        if row is None:
            continue
        if _gpu_of(capping) not in row.capped_gpus:
            capped_gpus += 1
        row.capped_gpus[_gpu_of(capping)] = capping

    status = await guardrail_status(rt)
    breaker = status["circuit_breaker"]
    limit, used = int(breaker["limit"]), int(breaker["quarantined"])
    rate = status["rate_limit"]
    headroom: JsonObject = {
        "quarantined": used,
        **_breaker_headroom(limit, used, int(breaker["gpu_nodes"]), str(breaker["limit_setting"])),
        "tripped": bool(breaker["tripped"]),
        "gpu_nodes": breaker["gpu_nodes"],
        "rate_recent": rate["recent"],
        "rate_limit": rate["limit"],
        "rate_window_seconds": rate["window"],
        "rate_allowed": max(0, int(rate["limit"]) - int(rate["recent"])) if rate["limit"] else None,
    }
    ordered = sorted(nodes.values(), key=lambda n: (
        not n.in_quarantine, not n.quarantined, n.gpu_health != "unhealthy", not n.capped_gpus, not n.awaiting,
        not n.held, not n.recent, n.node,
    ))
    counts = {
        "quarantined_nodes": sum(1 for n in ordered if n.in_quarantine),
        "counted_nodes": sum(1 for n in ordered if n.quarantined and not n.in_quarantine),
        "gpu_nodes": sum(1 for n in ordered if n.facts is not None and n.facts.gpu),
        "unhealthy_gpu_nodes": sum(1 for n in ordered if n.gpu_health == "unhealthy"),
        "capped_gpus": capped_gpus,
        "awaiting_approval": sum(len(n.awaiting) for n in ordered),
        "held": sum(len(n.held) for n in ordered),
        "recent": sum(len(n.recent) for n in ordered),
        "recent_nodes": sum(1 for n in ordered if n.recent),
        "elsewhere": len(elsewhere),
    }
    return Fleet(nodes=ordered, counts=counts, headroom=headroom, window=window, guardrails=status,
                 elsewhere=list(elsewhere.values()), inventory=inventory is not None)


def _names_a_node(rem: Remediation, inventory: NodeInventory | None) -> bool:
    """Whether the remediation's node is a node: one the inventory knows, or one named by a node label (node,
    Hostname, ...), not an address read from `instance` that no node's InternalIP resolved."""
    if inventory is not None and rem.node in inventory:
        return True
    return bool(stored_alert_field(rem.plan, "node_source") != "instance")
