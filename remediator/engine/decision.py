"""One decision for one firing alert, from the alert, the definitions and the facts read about its GPU.

Pure: the worker reads the facts from the store (for a whole claimed batch at once, engine/worker.py) and
`remediator replay` reads them from history (remediator/tools/replay.py); both call `decide_alert`, so a backtest
cannot disagree with production about which playbook an alert starts, or why it starts none. What a start
becomes once it meets the rows of the moment (linked to an active remediation of the same target and
playbook, or held back by the rule's cooldown) is the store's part, decided inside its transaction.

The order is the controller's: the highest-priority matching rule; an application-class Xid repeating on
one GPU across pods escalates to the GPU-reset playbook; no rule is `unmatched`; a node or GPU target
without a node is `no_target`; a fault that recurs within RECURRENCE_WINDOW after a ladder remediation
returned the GPU to service starts the ladder's next rung (engine/ladder.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from remediator.definitions import DefinitionSet
from remediator.domain.json_values import JsonObject
from remediator.domain.plan_snapshot import stored_alert_field, stored_xid_code
from remediator.domain.states import returned_at
from remediator.domain.timestamps import as_utc
from remediator.engine.planning import Proposal, propose, target_for
from remediator.intake.normalize import GpuAlert, parse_xid

if TYPE_CHECKING:
    from remediator.settings import Settings

__all__ = [
    "APP_XID_RULE", "RECURRENCE_RULE", "Decision", "DecisionFacts", "DecisionPolicy", "LadderRemediation",
    "NoTarget", "Recurrence", "Start", "Unmatched", "decide_alert", "escalation_subject", "fault_history", "gpu_of",
    "history_since", "ladder_proposal", "recurrence", "returned_at", "rung", "same_subject",
]

APP_XID_RULE = "escalation:repeated-application-xid"
RECURRENCE_RULE = "escalation:recurrence"
RESTART_APP = "RESTART_APP"
# Recurrences are also counted over these windows (the effectiveness metrics), whatever RECURRENCE_WINDOW is.
RECURRENCE_WINDOWS: tuple[tuple[str, timedelta], ...] = (("24h", timedelta(hours=24)), ("7d", timedelta(days=7)))
HISTORY_ROWS = 50


class LadderRemediation(Protocol):
    """What the ladder reads of a past remediation (a store row, or a replayed one)."""

    id: str
    node: str | None
    gpu_uuid: str | None
    playbook: str
    state: str
    quarantined: bool
    created_at: datetime
    finished_at: datetime | None
    alertname: str
    plan: JsonObject


@dataclass(frozen=True)
class DecisionPolicy:
    """The settings a decision reads (remediator/settings.py names them)."""

    escalation_playbook: str = "reset-gpu"
    escalation_count: int = 3
    escalation_pods: int = 2
    escalation_window: timedelta = timedelta(hours=1)
    ladder: tuple[str, ...] = ("reset-gpu", "reboot-node", "rma-gpu")
    recurrence_window: timedelta = timedelta(hours=24)

    @classmethod
    def of(cls, settings: Settings) -> DecisionPolicy:
        return cls(
            escalation_playbook=settings.escalation_playbook, escalation_count=settings.escalation_count,
            escalation_pods=settings.escalation_pods, escalation_window=settings.escalation_window,
            ladder=tuple(settings.escalation_ladder), recurrence_window=settings.recurrence_window,
        )


@dataclass(frozen=True)
class DecisionFacts:
    """What the store knew about the alert's GPU and node when the alert was decided.

    `gpu_alerts`: (labels, annotations) of the firing first deliveries of the same alert name on the same GPU
    within ESCALATION_WINDOW, this alert included. `node_history`: the node's remediations since
    `history_since(now, policy)`. Either may be empty when the decision cannot need it.
    """

    now: datetime
    gpu_alerts: Sequence[tuple[Mapping[str, str], Mapping[str, str]]] = ()
    node_history: Sequence[LadderRemediation] = ()


@dataclass(frozen=True)
class Unmatched:
    outcome: str = "unmatched"


@dataclass(frozen=True)
class NoTarget:
    proposal: Proposal
    problem: str | None
    outcome: str = "no_target"


@dataclass(frozen=True)
class Recurrence:
    """The alert's GPU faulted again `after` the remediation `previous` returned it to service."""

    previous: LadderRemediation
    after: timedelta
    within_window: bool


@dataclass(frozen=True)
class Start:
    proposal: Proposal
    escalation: JsonObject | None = None
    recurrence: Recurrence | None = None
    outcome: str = field(default="start")


Decision = Unmatched | NoTarget | Start


def rung(ladder: Sequence[str], playbook: str) -> int | None:
    """The 1-based position of `playbook` on the ladder, or None when it is not on it."""
    return ladder.index(playbook) + 1 if playbook in ladder else None


def gpu_of(rem: LadderRemediation) -> str | None:
    """The GPU a remediation was about (a node target keeps the alert's GPU in its plan)."""
    return rem.gpu_uuid or stored_alert_field(rem.plan, "gpu_uuid")


def same_subject(rem: LadderRemediation, node: str | None, gpu_uuid: str | None) -> bool:
    """Was `rem` about the same GPU (both name a UUID), else about the same node?"""
    theirs = gpu_of(rem)
    if gpu_uuid and theirs:
        return theirs == gpu_uuid
    return rem.node == node


def fault_history(rems: Iterable[LadderRemediation]) -> list[JsonObject]:
    """Oldest first: when each fault came, its alert and Xid, what ran and how it ended."""
    rows: list[JsonObject] = []
    for rem in sorted(rems, key=lambda r: r.created_at):
        xid = stored_xid_code(rem.plan)
        rows.append({
            "at": rem.created_at.isoformat(), "alertname": rem.alertname, "xid": xid, "gpu": gpu_of(rem),
            "playbook": rem.playbook, "outcome": rem.state, "remediation": rem.id,
        })
    return rows[-HISTORY_ROWS:]




def history_since(now: datetime, policy: DecisionPolicy) -> datetime:
    """How far back the node history must reach for `decide_alert` (the longest recurrence window, and a day)."""
    longest = max(policy.recurrence_window, *(w for _, w in RECURRENCE_WINDOWS))
    return now - longest - timedelta(days=1)


def escalation_subject(alert: GpuAlert, defs: DefinitionSet, policy: DecisionPolicy) -> tuple[str, str] | None:
    """(node, GPU) whose recent alerts the application-Xid escalation counts, or None when it cannot apply."""
    gpu = alert.gpu_uuid or alert.gpu_index
    if alert.xid is None or not alert.node or not gpu or policy.escalation_playbook not in defs.playbooks:
        return None
    if defs.xid.lookup(alert.xid).resolution != RESTART_APP:
        return None
    return alert.node, gpu


def decide_alert(alert: GpuAlert, defs: DefinitionSet, policy: DecisionPolicy, facts: DecisionFacts) -> Decision:
    """The decision for one firing alert (see the module docstring for the order)."""
    proposal = _app_xid_escalation(alert, defs, policy, facts) or propose(alert, defs)
    if proposal is None:
        return Unmatched()
    if (proposal.target.kind == "node" or proposal.target.on_gpu) and not alert.node:
        return NoTarget(proposal, alert.node_problem)
    found = recurrence(alert, proposal, policy, facts)
    if found is None:
        return Start(proposal)
    again, climbed = found
    if climbed is None:
        return Start(proposal, recurrence=again)
    escalated = ladder_proposal(defs, climbed[0], alert, RECURRENCE_RULE)
    if escalated is None:
        return Start(proposal, recurrence=again)
    return Start(escalated, escalation=climbed[1], recurrence=again)


def _app_xid_escalation(
    alert: GpuAlert, defs: DefinitionSet, policy: DecisionPolicy, facts: DecisionFacts
) -> Proposal | None:
    """Application-class Xids repeating on one GPU across pods escalate to the GPU-reset playbook."""
    if escalation_subject(alert, defs, policy) is None:
        return None
    app_class = [
        labels for labels, annotations in facts.gpu_alerts
        if (code := parse_xid(labels, annotations)) is not None and defs.xid.lookup(code).resolution == RESTART_APP
    ]
    pods = {labels.get("exported_pod") or labels.get("pod") for labels in app_class} - {None, ""}
    if len(app_class) < policy.escalation_count or len(pods) < policy.escalation_pods:
        return None
    playbook = defs.playbooks[policy.escalation_playbook]
    return Proposal(
        rule_name=APP_XID_RULE, playbook=playbook, params=dict(playbook.params),
        target=target_for(playbook.target, alert), cooldown=None, require_approval=False,
    )


def recurrence(
    alert: GpuAlert, proposal: Proposal, policy: DecisionPolicy, facts: DecisionFacts
) -> tuple[Recurrence, tuple[str, JsonObject] | None] | None:
    """When the alert's GPU (node when no UUID) was returned to service by a ladder remediation before: the
    recurrence, and the rung to climb to (playbook name, `escalation` record) when it came back within the
    window and the rule's own playbook is not above the rung that "healed" it."""
    ladder = list(policy.ladder)
    asked = rung(ladder, proposal.playbook.name)
    if asked is None or not alert.node:
        return None
    now = as_utc(facts.now)  # the decision's time may come from outside (replay, simulate)
    history = list(facts.node_history)
    back = [
        (at, r) for r in history
        if same_subject(r, alert.node, alert.gpu_uuid) and (at := returned_at(r)) is not None and at <= now
    ]
    if not back:
        return None
    at, previous = max(back, key=lambda pair: pair[0])
    within = now - at <= policy.recurrence_window
    again = Recurrence(previous, now - at, within)
    was = rung(ladder, previous.playbook)
    if not within or was is None or was < asked:
        return again, None
    target_rung = min(was + 1, len(ladder))
    escalation: JsonObject = {
        "from": previous.id, "reason": "recurrence", "rung": target_rung, "ladder": [*ladder],
        "recurrence_seconds": (now - at).total_seconds(),
        "history": [*fault_history(r for r in history if same_subject(r, alert.node, alert.gpu_uuid))],
        "gate": None,
    }
    return again, (ladder[target_rung - 1], escalation)


def ladder_proposal(defs: DefinitionSet, playbook_name: str, alert: GpuAlert, rule: str) -> Proposal | None:
    """The proposal for a rung of the ladder (None when that playbook is not loaded)."""
    playbook = defs.playbooks.get(playbook_name)
    if playbook is None:
        return None
    return Proposal(
        rule_name=rule, playbook=playbook, params=dict(playbook.params),
        target=target_for(playbook.target, alert), cooldown=None, require_approval=False,
    )
