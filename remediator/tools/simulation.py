"""`remediator simulate`: an Alertmanager payload in, the plan out, with no cluster and no database.

Uses the same normalisation, matching, planning and guardrail code as the worker; the fleet state the
guardrails see is an empty one (nothing quarantined, not paused), which the report says.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from remediator.actions.context import gather_context
from remediator.actions.registry import default_registry
from remediator.definitions import DefinitionSet
from remediator.domain.guardrails import FleetState, guardrail_facts, guardrail_verdict
from remediator.engine.bootstrap import load_defs
from remediator.engine.decision import DecisionFacts, DecisionPolicy, NoTarget, Unmatched, decide_alert
from remediator.engine.planning import quarantines
from remediator.engine.return_gate import return_gate
from remediator.intake.models import AlertmanagerPayload
from remediator.intake.normalize import normalize
from remediator.settings import Settings
from remediator.store.repository import utcnow
from remediator.tools.plan_only import plan_proposal

__all__ = ["render_text", "simulate_alerts", "simulate_payload"]


def simulate_payload(settings: Settings, text: str) -> dict[str, Any]:
    payload = AlertmanagerPayload.model_validate_json(text)
    actions = default_registry()
    defs = load_defs(settings, actions)
    return {"definitions_version": defs.version, "alerts": simulate_alerts(settings, defs, payload, actions)}


def simulate_alerts(
    settings: Settings, defs: DefinitionSet, payload: AlertmanagerPayload, actions: dict[str, Any]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for raw in payload.alerts:
        alert = normalize(
            raw.labels, raw.annotations, status=raw.status, fingerprint=raw.fingerprint, kinds=defs.alert_kinds,
            node_precedence=settings.node_label_precedence, starts_at=raw.starts_at.isoformat(),
        )
        entry: dict[str, Any] = {"alert": {k: v for k, v in asdict(alert).items() if k not in ("labels",)},
                                 "labels": dict(raw.labels)}
        if raw.status == "resolved":
            entry["outcome"] = "resolved: pending or held remediations for this alert are cancelled; finished " \
                               "ones with on_resolved: revert run their revert steps"
            out.append(entry)
            continue
        # The controller's own decision, over an empty history (no earlier alerts or remediations).
        decision = decide_alert(alert, defs, DecisionPolicy.of(settings), DecisionFacts(now=utcnow()))
        if isinstance(decision, Unmatched):
            entry["outcome"] = "unmatched: stored and audited, no remediation"
            out.append(entry)
            continue
        proposal = decision.proposal
        context = asyncio.run(gather_context(None, proposal.target, raw.labels, settings))
        plan = plan_proposal(proposal, alert, defs, context)
        variables, steps = plan.variables, plan.steps
        quarantining = quarantines(proposal.playbook, actions)
        verdict = guardrail_verdict(
            guardrail_facts(settings, now=utcnow(), node=alert.node, node_excluded=False, quarantines=quarantining,
                            fleet=FleetState())
        )
        entry.update(
            outcome="would start a remediation" if not isinstance(decision, NoTarget)
            else f"no target: {decision.problem or 'no node label found'}",
            rule=proposal.rule_name,
            playbook=proposal.playbook.name,
            target=proposal.target.key,
            xid=variables["xid"],
            steps=[asdict(s) for s in steps],
            return_gate=[g.as_dict() for g in return_gate(actions, proposal.playbook, variables, proposal.target)],
            guardrails={"allow": verdict.allow, "guardrail": verdict.name, "reason": verdict.reason,
                        "assumed": "empty fleet state: nothing quarantined, not paused"},
        )
        out.append(entry)
    return out


def render_text(report: dict[str, Any]) -> str:
    lines = [f"definitions version {report['definitions_version']}"]
    for i, entry in enumerate(report["alerts"]):
        alert = entry["alert"]
        lines.append("")
        lines.append(f"alert {i}: {alert['alertname']} ({alert['status']}) node={alert['node']} "
                     f"gpu={alert['gpu_uuid'] or alert['gpu_index']} kind={alert['kind']}")
        lines.append(f"  outcome: {entry['outcome']}")
        if "rule" not in entry:
            continue
        lines.append(f"  rule: {entry['rule']} -> playbook {entry['playbook']} on {entry['target']}")
        if entry["xid"].get("code") is not None:
            xid = entry["xid"]
            lines.append(f"  xid {xid['code']}: {xid['resolution']} ({xid['cause']})")
        for step in entry["steps"]:
            mark = "run " if step["runs"] else "skip"
            approval = " [approval required]" if step["approval"] else ""
            detail = step["note"] or ", ".join(f"{k}={v}" for k, v in step["params"].items())
            lines.append(f"  {mark} {step['index']}. {step['name']}: {step['action']}({detail}){approval}")
        gate = entry.get("return_gate") or []
        lines.append("  return to service: " + ("after its return gate:" if gate else
                                               "no return gate (the undo runs as soon as the return starts)"))
        for step in gate:
            lines.append(f"    {step['index'] + 1}. {step['name']}: {step['action']} - {step['says']}")
        g = entry["guardrails"]
        lines.append(f"  guardrails: {'allow' if g['allow'] else 'hold'} ({g['reason']}; {g['assumed']})")
    return "\n".join(lines)
