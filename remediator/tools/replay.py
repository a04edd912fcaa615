"""`remediator replay`: the stored alerts run plan-only through (edited) definitions, compared with history.

For every firing alert received since a point in time (first deliveries only; repeats never started
anything), the alert is matched and planned with the given definitions by the controller's own planning
code (remediator.tools.plan_only) and compared with what the controller actually did then:

* would start: no remediation was started for it, the new definitions would start one;
* would not start: a remediation was started, the new definitions match nothing (or find no target);
* changed: a different rule, playbook or target, or different steps: a step added, removed, reordered,
  or rendered with other parameters.

Steps are rendered with the context the remediation gathered at the time (pods, node) and the outputs its
steps produced, so only the definitions differ. What a remediation actually ran is taken from its step
rows; steps it never reached are rendered from the playbook snapshot it started with. Facts that depend
on the fleet at the time are carried over from history: an alert linked to an active remediation, or held
back by a cooldown, stays so while the new definitions pick the same playbook and target. Which playbook an
alert starts is decided by the controller's own `decide_alert` (engine/decision.py) over the facts stored at the
time: the alerts received up to it (the repeated application-Xid escalation) and its node's remediations
(the escalation ladder's recurrence). Guardrail verdicts are not compared.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from remediator.actions.context import gather_context
from remediator.definitions import DefinitionSet
from remediator.domain.plan_snapshot import plan_of, playbook_of
from remediator.domain.timestamps import as_utc
from remediator.engine.decision import DecisionFacts, DecisionPolicy, NoTarget, Unmatched, decide_alert, history_since
from remediator.engine.decision_facts import BatchFacts
from remediator.engine.planning import forward_outputs, plan_steps, stored_variables
from remediator.errors import ConfigError
from remediator.intake.normalize import GpuAlert, normalize
from remediator.settings import Settings
from remediator.store.db import make_engine, make_sessionmaker
from remediator.store.db import parse_url as make_url
from remediator.store.models import AlertRow, Remediation, StepRow
from remediator.store.repository import Repository
from remediator.tools.plan_only import jsonable, plan_proposal, step_view

__all__ = ["ReplayEntry", "ReplayReport", "render_text", "replay", "replay_database"]

DiffKind = Literal["unchanged", "would_start", "would_not_start", "changed"]
_STARTS = "started"


@dataclass
class ReplayEntry:
    """One stored alert: what happened, what would happen now, and how they differ."""

    alert_id: int
    alertname: str
    fingerprint: str
    received_at: str
    node: str | None
    labels: dict[str, str]
    actual: dict[str, Any]
    replay: dict[str, Any]
    kind: DiffKind = "unchanged"
    changes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "alert_id": self.alert_id, "alertname": self.alertname, "fingerprint": self.fingerprint,
            "received_at": self.received_at, "node": self.node, "labels": self.labels, "kind": self.kind,
            "changes": self.changes, "actual": self.actual, "replay": self.replay,
        }


@dataclass
class ReplayReport:
    since: str
    until: str
    definitions_version: str
    rules_dir: str
    playbooks_dir: str
    entries: list[ReplayEntry]
    skipped: dict[str, int]

    @property
    def differences(self) -> list[ReplayEntry]:
        return [e for e in self.entries if e.kind != "unchanged"]

    def summary(self) -> dict[str, int]:
        counts = {"unchanged": 0, "would_start": 0, "would_not_start": 0, "changed": 0}
        for entry in self.entries:
            counts[entry.kind] += 1
        return counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "until": self.until,
            "definitions": {"version": self.definitions_version, "rules_dir": self.rules_dir,
                            "playbooks_dir": self.playbooks_dir},
            "alerts": len(self.entries),
            "skipped": dict(self.skipped),
            "summary": self.summary(),
            "differences": [e.as_dict() for e in self.differences],
        }


# -- what happened -----------------------------------------------------------------------------------


def _stored_alert(rem: Remediation) -> GpuAlert:
    return plan_of(rem).alert


def _actual_steps(rem: Remediation, rows: list[StepRow]) -> list[dict[str, Any]]:
    """The steps the remediation ran (its step rows) or, where it never got to them, would have run."""
    plan = plan_of(rem)
    playbook = playbook_of(rem)
    planned = plan_steps(playbook, stored_variables(rem, rows), require_approval=plan.require_approval)
    by_index = {r.idx: r for r in rows if r.phase == "forward"}
    views: list[dict[str, Any]] = []
    for step in planned:
        view = step_view(step)
        row = by_index.get(step.index)
        if row is not None and row.status == "skipped":
            view = {"name": step.name, "action": step.action, "runs": False}
        elif row is not None and row.attempts > 0:
            view["runs"] = True
            view["params"] = jsonable(row.params)
            view.pop("note", None)
        views.append(view)
    return views


def _actual(row: AlertRow, rem: Remediation | None, rows: list[StepRow]) -> dict[str, Any]:
    out: dict[str, Any] = {"outcome": row.outcome or "unknown"}
    if rem is None:
        return out
    out.update(
        remediation_id=rem.id, state=rem.state, rule=rem.rule, playbook=rem.playbook, target=rem.target_key,
        definitions_version=rem.definitions_version,
    )
    if row.outcome == _STARTS:
        out["steps"] = _actual_steps(rem, rows)
    return out


# -- what would happen -------------------------------------------------------------------------------


@dataclass
class _History:
    """The facts `decide_alert` read at the time, rebuilt from what the store kept: the alerts received up to this
    one (for the repeated application-Xid escalation), and the node's remediations (for the ladder)."""

    alerts: list[AlertRow]
    remediations: dict[str, list[Remediation]]
    node_labels: tuple[str, ...]
    window: timedelta

    def __post_init__(self) -> None:
        # Firing first deliveries by alert name, in order of arrival, so that each replayed alert looks only
        # at its own name's within the window (found by bisection, not by scanning the whole history).
        self._firing: dict[str, tuple[list[datetime], list[AlertRow]]] = {}
        rows = sorted((r for r in self.alerts if r.status == "firing" and r.state != "repeat"),
                      key=lambda r: r.received_at)
        for r in rows:
            times, kept = self._firing.setdefault(r.alertname, ([], []))
            times.append(r.received_at)
            kept.append(r)

    def facts(self, row: AlertRow, alert: GpuAlert) -> DecisionFacts:
        at = row.received_at
        times, kept = self._firing.get(alert.alertname, ([], []))
        window = kept[bisect_left(times, at - self.window) : bisect_right(times, at)]
        recent = [(r.alertname, r.labels, r.annotations) for r in window]
        batch = BatchFacts(at, recent, {alert.node or "": self.remediations.get(alert.node or "", [])},
                           self.node_labels)
        return batch.of(alert)


@dataclass
class _Replayer:
    defs: DefinitionSet
    settings: Settings
    history: _History
    # (target, playbook) -> alert id, for remediations only the replay starts (history had none).
    new_active: dict[str, int] = field(default_factory=dict)

    def alert(self, row: AlertRow, rem: Remediation | None) -> GpuAlert:
        return _normalized(self.defs, self.settings, row, rem)

    async def plan(
        self, row: AlertRow, rem: Remediation | None, rows: list[StepRow], actual: Mapping[str, Any]
    ) -> dict[str, Any]:
        alert = self.alert(row, rem)
        decision = decide_alert(alert, self.defs, DecisionPolicy.of(self.settings), self.history.facts(row, alert))
        if isinstance(decision, Unmatched):
            return {"outcome": "unmatched"}
        proposal = decision.proposal
        out: dict[str, Any] = {
            "rule": proposal.rule_name, "playbook": proposal.playbook.name, "target": proposal.target.key,
        }
        if isinstance(decision, NoTarget):
            return {"outcome": "no_target", **out}
        same_pair = actual.get("playbook") == proposal.playbook.name and actual.get("target") == proposal.target.key
        if actual["outcome"] == "linked" and same_pair:
            return {"outcome": "linked", "remediation_id": actual.get("remediation_id"), **out}
        if actual["outcome"] == "cooldown" and actual.get("rule") == proposal.rule_name and same_pair:
            return {"outcome": "cooldown", "remediation_id": actual.get("remediation_id"), **out}
        key = f"{proposal.target.key}|{proposal.playbook.name}"
        historic = actual["outcome"] == _STARTS and same_pair
        if not historic and key in self.new_active:
            return {"outcome": "linked", "linked_to_alert": self.new_active[key], **out}
        if not historic:
            self.new_active[key] = row.id
        if rem is not None and rem.target_key == proposal.target.key:
            context: Mapping[str, Any] = rem.context
        else:
            context = await gather_context(None, proposal.target, row.labels, self.settings)
        plan = plan_proposal(proposal, alert, self.defs, context, forward_outputs(rows) if historic else None,
                             escalation=decision.escalation)
        return {"outcome": _STARTS, **out, "steps": [step_view(s) for s in plan.steps]}


def _normalized(defs: DefinitionSet, settings: Settings, row: AlertRow, rem: Remediation | None) -> GpuAlert:
    alert = normalize(
        row.labels, row.annotations, status=row.status, fingerprint=row.fingerprint,
        kinds=defs.alert_kinds, node_precedence=settings.node_label_precedence,
        starts_at=row.starts_at.isoformat() if row.starts_at else "",
    )
    if alert.node is None and rem is not None and rem.node:
        alert = replace(alert, node=rem.node)  # resolved from an instance IP at the time
    return alert


# -- comparing ---------------------------------------------------------------------------------------


def _describe(step: Mapping[str, Any]) -> str:
    return f"{step['name']} ({step['action']})"


def _step_changes(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    old = [s for s in before if s.get("runs")]
    new = [s for s in after if s.get("runs")]
    old_by, new_by = {s["name"]: s for s in old}, {s["name"]: s for s in new}
    changes: list[str] = []
    for step in old:
        if step["name"] not in new_by:
            changes.append(f"step {_describe(step)} would no longer run")
    for step in new:
        if step["name"] not in old_by:
            changes.append(f"step {_describe(step)} would run (new), params {step.get('params', {})}")
    for step in new:
        prior = old_by.get(step["name"])
        if prior is None:
            continue
        if prior["action"] != step["action"]:
            changes.append(f"step {step['name']}: action {prior['action']} -> {step['action']}")
        p_old, p_new = prior.get("params") or {}, step.get("params") or {}
        for key in sorted(set(p_old) | set(p_new)):
            if p_old.get(key) != p_new.get(key):
                was = repr(p_old[key]) if key in p_old else "(unset)"
                now = repr(p_new[key]) if key in p_new else "(unset)"
                changes.append(f"step {step['name']}: params.{key}: {was} -> {now}")
        if bool(prior.get("approval")) != bool(step.get("approval")):
            needed = "required" if step.get("approval") else "no longer required"
            changes.append(f"step {step['name']}: approval {needed}")
    common_old = [s["name"] for s in old if s["name"] in new_by]
    common_new = [s["name"] for s in new if s["name"] in old_by]
    if common_old != common_new:
        changes.append(f"step order: {common_old} -> {common_new}")
    return changes


def _classify(actual: Mapping[str, Any], planned: Mapping[str, Any]) -> tuple[DiffKind, list[str]]:
    started, would = actual["outcome"] == _STARTS, planned["outcome"] == _STARTS
    if would and not started:
        where = f"; actually {actual['outcome']}"
        if actual.get("remediation_id"):
            where += f" ({actual.get('playbook')} on {actual.get('target')}, remediation {actual['remediation_id']})"
        return "would_start", [f"would start {planned['playbook']} on {planned['target']} (rule {planned['rule']})"
                               + where]
    if started and not would:
        now = planned["outcome"] + (f" (rule {planned['rule']})" if planned.get("rule") else "")
        return "would_not_start", [
            f"would not start {actual.get('playbook')} on {actual.get('target')} (rule {actual.get('rule')}, "
            f"remediation {actual.get('remediation_id')}); now {now}"
        ]
    changes: list[str] = []
    for key in ("rule", "playbook", "target"):
        if actual.get(key) != planned.get(key):
            changes.append(f"{key}: {actual.get(key)} -> {planned.get(key)}")
    if started and would:
        changes.extend(_step_changes(actual.get("steps") or [], planned.get("steps") or []))
    elif actual["outcome"] != planned["outcome"] and not changes:
        changes.append(f"outcome: {actual['outcome']} -> {planned['outcome']}")
    return ("changed" if changes else "unchanged"), changes


# -- the whole run -----------------------------------------------------------------------------------


async def replay(
    repo: Repository, settings: Settings, defs: DefinitionSet, since: datetime, *, until: datetime | None = None
) -> ReplayReport:
    """Replay every firing alert stored since `since` (received time) through `defs`."""
    policy = DecisionPolicy.of(settings)
    stored = await repo.list_alerts(since=since - policy.escalation_window)
    rows = [r for r in stored if r.received_at >= as_utc(since)]
    skipped = {"resolved": 0, "repeats": 0, "unprocessed": 0, "errors": 0}
    firing: list[AlertRow] = []
    for row in rows:
        if row.state == "repeat" or row.repeat_of is not None:
            skipped["repeats"] += 1
        elif row.state != "done":
            skipped["unprocessed"] += 1
        elif row.status == "resolved" or row.outcome == "resolved":
            skipped["resolved"] += 1
        elif row.outcome == "error":
            skipped["errors"] += 1
        else:
            firing.append(row)
    rem_ids = sorted({r.remediation_id for r in firing if r.remediation_id})
    rems = await repo.get_remediations(rem_ids)
    steps = await repo.steps_for([i for i in rem_ids if i in rems])
    nodes = sorted({str(rem.node) for rem in rems.values() if rem.node} | {
        str(n) for row in firing if (n := _normalized(defs, settings, row, None).node)})
    earliest = min((r.received_at for r in firing), default=as_utc(since))
    histories = await repo.node_histories(nodes, history_since(earliest, policy)) if nodes else {}
    replayer = _Replayer(
        defs, settings, _History(stored, histories, tuple(settings.node_label_precedence), policy.escalation_window)
    )
    entries: list[ReplayEntry] = []
    for row in firing:
        rem = rems.get(row.remediation_id or "")
        rem_rows = steps.get(rem.id, []) if rem is not None else []
        actual = _actual(row, rem, rem_rows)
        planned = await replayer.plan(row, rem, rem_rows, actual)
        kind, changes = _classify(actual, planned)
        entries.append(
            ReplayEntry(
                alert_id=row.id, alertname=row.alertname, fingerprint=row.fingerprint,
                received_at=row.received_at.isoformat(), node=replayer.alert(row, rem).node,
                labels={str(k): str(v) for k, v in row.labels.items()}, actual=actual, replay=planned, kind=kind,
                changes=changes,
            )
        )
    end = until or repo.clock()
    return ReplayReport(
        since=since.isoformat(), until=end.isoformat(), definitions_version=defs.version,
        rules_dir=str(settings.rules_dir), playbooks_dir=str(settings.playbooks_dir), entries=entries,
        skipped=skipped,
    )


def _require_database(database_url: str) -> None:
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and not os.path.exists(url.database):
        raise ConfigError(f"no database at {url.database} (REMEDIATOR_DATABASE_URL)")


async def replay_database(settings: Settings, defs: DefinitionSet, since: datetime) -> ReplayReport:
    """`replay` over the database of `settings` (read only; a missing SQLite file is an error, not created)."""
    _require_database(settings.database_url)
    engine = make_engine(settings.database_url)
    try:
        return await replay(Repository(make_sessionmaker(engine)), settings, defs, since)
    finally:
        await engine.dispose()


_HEADLINES: dict[str, str] = {
    "would_start": "WOULD START", "would_not_start": "WOULD NOT START", "changed": "CHANGED",
}


def render_text(report: ReplayReport) -> str:
    lines = [
        f"replay of {len(report.entries)} firing alert(s) received {report.since} .. {report.until}",
        f"definitions {report.definitions_version} (rules {report.rules_dir}, playbooks {report.playbooks_dir})",
    ]
    for entry in report.differences:
        lines.append("")
        what = ""
        if entry.kind == "changed" and entry.actual.get("remediation_id"):
            what = (
                f" {entry.actual.get('playbook')} on {entry.actual.get('target')} (remediation "
                f"{entry.actual['remediation_id']}, {entry.actual.get('state')})"
            )
        lines.append(
            f"alert {entry.alert_id} {entry.alertname} node={entry.node or '-'} received {entry.received_at}: "
            f"{_HEADLINES[entry.kind]}{what}"
        )
        lines.extend(f"    {change}" for change in entry.changes)
    summary = report.summary()
    lines.append("")
    lines.append(
        f"{len(report.differences)} difference(s): {summary['would_start']} would start, "
        f"{summary['would_not_start']} would not start, {summary['changed']} changed; "
        f"{summary['unchanged']} unchanged"
    )
    skipped = ", ".join(f"{n} {k}" for k, n in report.skipped.items() if n)
    if skipped:
        lines.append(f"not replayed: {skipped}")
    return "\n".join(lines)
