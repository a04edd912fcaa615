"""The storm guardrail: hold new remediations on nodes that share a storm's suspected cause, for one decision.

At each admission the faults of the last `storm_window` are analysed (remediator/domain/storms.py) against the fleet's
attribute counts that the node inventory keeps; the analysis is recomputed only when the set of faulting nodes
or the inventory changed, so a storm of alerts costs one store read per admission, not one fleet walk. When the
top candidate explains at least `storm_hold_nodes` faulting nodes with a corrected p-value under
`storm_p_value`, a storm row is opened (or grown) for that cause. A remediation whose node shares the cause of
an open storm is held with the reason `storm <id>: ...`; approving the storm wakes every one it holds and lets
later ones through, rejecting cancels those it holds (engine/storm_control.py). Nodes outside the cause go on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from remediator.domain.plan_snapshot import stored_xid_code
from remediator.domain.storms import (
    Attribute,
    Fault,
    FleetCounts,
    StormAnalysis,
    StormPolicy,
    StormState,
    analyse,
    fault_attributes,
    node_attributes,
)
from remediator.engine.runtime import Runtime
from remediator.store.admission import AdmissionReads
from remediator.store.models import Remediation
from remediator.store.storm_store import STORM_REASON

__all__ = ["StormGuard", "policy_of"]

log = logging.getLogger(__name__)


def policy_of(settings: Any) -> StormPolicy:
    return StormPolicy(min_nodes=settings.storm_min_nodes, hold_nodes=settings.storm_hold_nodes,
                       p_value=settings.storm_p_value)


def hold_reason(storm: Mapping[str, Any]) -> str:
    return (f"{STORM_REASON}{storm['id']}: suspected shared cause: {storm['cause']['text']}; held for one group "
            f"decision (remediator storm approve|reject {storm['id']})")


class StormGuard:
    """One per executor: the last analysis, kept while the faulting nodes and the inventory stay the same."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._key: tuple[frozenset[str], int] | None = None
        self._analysis: StormAnalysis | None = None
        self._told: set[str] = set()  # storms changed by admissions since the last `announce`
        # The window's faults by remediation id, with whether the row had its context when read: a row is read
        # whole again only when it is new to the guard or its context was stored (or rolled back) since.
        self._faults: dict[str, tuple[Fault, bool]] = {}
        self._sizes: dict[str, int] = {}  # storm id -> nodes when last logged

    def _fleet(self) -> FleetCounts | None:
        inventory = self.rt.inventory
        return inventory.attributes if inventory is not None and inventory.synced else None

    async def evaluate(self, now: datetime, reads: AdmissionReads) -> StormAnalysis | None:
        """Analyse the window; open or grow the storm its cause names. In the admitting transaction."""
        fleet = self._fleet()
        if fleet is None or not fleet.size:
            return None
        settings = self.rt.settings
        faults = await self._window(now - settings.storm_window, reads)
        key = (frozenset(f.node for f in faults), fleet.version)
        if key != self._key:  # the costly part, only when the faulting nodes or the inventory changed
            self._key, self._analysis = key, analyse(faults, fleet, policy_of(settings))
        cause = self._analysis.cause if self._analysis is not None else None
        if cause is not None:  # every time: a rolled-back admission must not lose the storm it opened
            storm, changed = await reads.record_storm(
                cause.key, cause.value, cause.text(), cause.nodes, self._analysis.as_dict() if self._analysis else {})
            if changed:
                self._told.add(storm["id"])
                if self._sizes.get(storm["id"]) != len(storm["nodes"]):  # opened or grown, not other candidates
                    self._sizes[storm["id"]] = len(storm["nodes"])
                    log.warning("storm %s: %s (%d nodes)", storm["id"], storm["cause"]["text"], len(storm["nodes"]))
        self._told.update(await reads.close_storms(now - settings.storm_window))
        return self._analysis

    async def _window(self, since: datetime, reads: AdmissionReads) -> list[Fault]:
        """The faults of the remediations created since `since`, as they are in this transaction. One narrow
        read of the window's ids a time, whole rows only for the ones not seen as they are now: a storm of
        admissions read every row's plan and context at each admission before (bench/decide.py)."""
        keys = await reads.window_keys(since)
        stale = [rid for rid, stored in keys if (seen := self._faults.get(rid)) is None or seen[1] != stored]
        if stale:
            for rid, (node, alertname, plan, labels, context, created) in (
                    await reads.window_faults_of(stale)).items():
                fault = Fault(node, fault_attributes(alertname, stored_xid_code(plan), labels, context), created)
                self._faults[rid] = (fault, bool(context))
        present = {rid for rid, _ in keys}
        for rid in [rid for rid in self._faults if rid not in present]:  # left the window (or rolled back)
            del self._faults[rid]
        return [self._faults[rid][0] for rid, _ in keys if rid in self._faults]

    def announce(self, held_by: str | None = None) -> None:
        """After the admitting transaction: tell people about the storms it opened, grew, changed or closed,
        and the one that now holds `held_by`'s remediation (its hold reason), through the storm's one Slack
        message (engine/storm_notices.py)."""
        if held_by is not None and held_by.startswith(STORM_REASON):
            self._told.add(held_by[len(STORM_REASON):].split(":", 1)[0])
        told, self._told = self._told, set()
        if self.rt.notifier is not None:
            for storm_id in sorted(told):
                self.rt.notifier.storm_event(storm_id)

    def attributes_of(self, rem: Remediation) -> frozenset[Attribute]:
        fleet = self._fleet()
        known = fleet.attributes(rem.node) if fleet is not None and rem.node else None
        if known is not None:
            return known
        node = (rem.context or {}).get("node") or {}
        return node_attributes({"metadata": {"labels": node.get("labels") or {}}})

    async def hold(self, rem: Remediation, now: datetime, reads: AdmissionReads) -> str | None:
        """Why this remediation waits for a storm's group decision, or None; read and written in the admitting
        transaction (`reads`), in the order the admissions come. Without a synced inventory nothing is read.
        An analysis error is logged and holds nothing (the other guardrails still apply); a store error is
        the admission's own."""
        if not self.rt.settings.storm_hold or not rem.node or self._fleet() is None:
            return None
        try:
            await self.evaluate(now, reads)
        except (ArithmeticError, ValueError, KeyError, TypeError):
            log.warning("storm analysis failed; no storm holds remediation %s", rem.id, exc_info=True)
        storms = await reads.live_storms()
        attrs = self.attributes_of(rem)
        for storm in storms:
            if (storm["cause"]["key"], storm["cause"]["value"]) not in attrs:
                continue
            if storm["state"] == StormState.OPEN:
                return hold_reason(storm)
            if storm["state"] == StormState.REJECTED:
                return (f"{STORM_REASON}{storm['id']}: suspected shared cause {storm['cause']['text']}; the group "
                        f"was rejected by {storm['decided_by']}: held for a person")
        return None

