"""The typed plan: what `remediation_plan` stores keeps its shape, and any stored plan reads back."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from remediator.actions.registry import default_registry
from remediator.definitions import DefinitionSet, load_definitions
from remediator.definitions.loader import BUNDLED_PLAYBOOKS, BUNDLED_RULES
from remediator.domain.plan_snapshot import (
    plan_of,
    read_plan,
    stored_alert_field,
    stored_playbook_field,
    stored_xid_code,
)
from remediator.engine.decision import ladder_proposal
from remediator.engine.ladder import remediation_plan
from remediator.engine.planning import Proposal
from remediator.engine.versions import versions_for
from remediator.intake.normalize import GpuAlert

KNOWN_ACTIONS: dict[str, type[BaseModel]] = {name: a.Params for name, a in default_registry().items()}

ALERT = GpuAlert(
    alertname="GpuXidError", status="firing", fingerprint="fp-1", kind="xid", node="node-1", node_source="node",
    gpu_uuid="GPU-1", gpu_index="0", model="H100", xid=79, starts_at="2026-01-02T03:04:05Z",
    labels={"alertname": "GpuXidError", "xid": "79"}, annotations={"summary": "fell off the bus"},
)
XID = {"code": 79, "resolution": "RESET_GPU", "cause": "bus", "description": "GPU fell off the bus",
       "recovery_action": None}
ESCALATION = {
    "from": "rem-0", "reason": "gate_failed", "rung": 2, "ladder": ["reset-gpu", "reboot-node", "rma-gpu"],
    "recurrence_seconds": None, "history": [{"at": "2026-01-01T00:00:00+00:00", "xid": 79, "gpu": "GPU-1"}],
    "gate": {"verdict": "fail"}, "why": "gate failed",
}


@pytest.fixture(scope="module")
def defs() -> DefinitionSet:
    return load_definitions(BUNDLED_RULES, BUNDLED_PLAYBOOKS, KNOWN_ACTIONS)


@pytest.fixture(scope="module")
def proposal(defs: DefinitionSet) -> Proposal:
    found = ladder_proposal(defs, "reset-gpu", ALERT, "escalation:gate-failed")
    assert found is not None
    return Proposal(
        rule_name=found.rule_name, playbook=found.playbook, params=found.params, target=found.target,
        cooldown=timedelta(minutes=30), require_approval=True,
    )


class _Row:
    def __init__(self, plan: Any) -> None:
        self.plan = plan


def test_the_stored_plan_keeps_its_shape(defs: DefinitionSet, proposal: Proposal) -> None:
    stored = remediation_plan(proposal, ALERT, defs, XID, escalation=ESCALATION)

    assert stored == {
        "playbook": proposal.playbook.model_dump(mode="json"),
        "alert": asdict(ALERT),
        "xid": XID,
        "require_approval": True,
        "cooldown_seconds": 1800.0,
        "versions": versions_for(defs, proposal.rule_name, proposal.playbook.name),
        "escalation": ESCALATION,
    }


def test_a_first_run_stores_no_escalation_and_keeps_the_xid_keys_it_was_given(
    defs: DefinitionSet, proposal: Proposal,
) -> None:
    recurrence = {k: v for k, v in ESCALATION.items() if k != "why"}

    assert "escalation" not in remediation_plan(proposal, ALERT, defs, {})
    assert remediation_plan(proposal, ALERT, defs, {})["xid"] == {}
    assert remediation_plan(proposal, ALERT, defs, XID, escalation=recurrence)["escalation"] == recurrence


def test_a_stored_plan_reads_back_typed(defs: DefinitionSet, proposal: Proposal) -> None:
    plan = plan_of(_Row(remediation_plan(proposal, ALERT, defs, XID, escalation=ESCALATION)))

    assert plan.playbook == proposal.playbook
    assert plan.alert == ALERT
    assert plan.xid.code == 79 and plan.xid_json == XID
    assert plan.require_approval is True
    assert plan.cooldown_seconds == 1800.0
    assert plan.versions == versions_for(defs, proposal.rule_name, proposal.playbook.name)
    assert plan.escalation is not None and plan.escalation.rung == 2 and plan.escalation.from_ == "rem-0"
    assert plan.escalation_json == ESCALATION


@pytest.mark.parametrize("raw", [None, {}, [], "plan"])
def test_a_plan_with_nothing_in_it_reads_as_defaults(raw: Any) -> None:
    plan = read_plan(raw)

    assert plan.playbook is None
    assert plan.alert.alertname == "" and plan.alert.gpu_uuid is None and dict(plan.alert.labels) == {}
    assert plan.xid_json == {} and plan.xid.code is None
    assert plan.require_approval is False
    assert plan.cooldown_seconds is None and plan.versions is None
    assert plan.escalation is None and plan.escalation_json is None


def test_an_earlier_plan_reads_without_failing(proposal: Proposal) -> None:
    earlier = {
        "playbook": {**proposal.playbook.model_dump(mode="json"), "retired_key": 1},
        "alert": {"alertname": "GpuXidError", "node": "node-1", "gpu_uuid": "GPU-1", "gone": "x"},
        "xid": {"code": 79, "extra": "kept"},
        "escalation": {"from": "rem-0", "rung": "not a rung"},
        "cooldown_seconds": True,
    }

    plan = read_plan(earlier)

    assert plan.playbook is None
    assert plan.alert.alertname == "GpuXidError" and plan.alert.gpu_uuid == "GPU-1" and plan.alert.status == ""
    assert plan.xid_json == {"code": 79, "extra": "kept"}
    assert plan.escalation is None
    assert plan.cooldown_seconds is None


def test_one_field_reads_without_parsing_the_rest(defs: DefinitionSet, proposal: Proposal) -> None:
    stored = remediation_plan(proposal, ALERT, defs, XID)

    assert stored_alert_field(stored, "gpu_uuid") == "GPU-1"
    assert stored_alert_field(stored, "model") == "H100"
    assert stored_xid_code(stored) == 79
    assert stored_alert_field({"alert": None}, "gpu_uuid") is None
    assert stored_xid_code({}) is None
    with pytest.raises(ValueError, match="no field"):
        stored_alert_field(stored, "gpu")


def test_a_playbook_field_reads_from_a_snapshot_that_no_longer_parses() -> None:
    partial = {"playbook": {"on_expiry": "continue", "on_resolved": "revert", "steps": [{"name": "drain"}]}}

    assert read_plan(partial).playbook is None
    assert stored_playbook_field(partial, "on_expiry") == "continue"
    assert stored_playbook_field(partial, "on_resolved") == "revert"
    assert stored_playbook_field({}, "on_expiry") is None
    with pytest.raises(ValueError, match="no field"):
        stored_playbook_field(partial, "expiry")
