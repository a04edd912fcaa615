"""The shipped rules and playbooks load cleanly, match the alerts they are for, and render valid params."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from remediator.definitions import DefinitionSet, check_paths, load_definitions
from remediator.definitions.conditions import compile_condition
from remediator.definitions.loader import BUNDLED_PLAYBOOKS, BUNDLED_RULES
from remediator.definitions.templates import render_params
from remediator.matching import match_rules
from tests.definitions.fake_actions import KNOWN_ACTIONS

ROOT = Path(__file__).resolve().parents[2]
FATAL_BUCKETS = ("RESET_GPU", "WORKFLOW_XID_48", "RESTART_BM")


@pytest.fixture(scope="module")
def defs() -> DefinitionSet:
    return load_definitions(BUNDLED_RULES, BUNDLED_PLAYBOOKS, KNOWN_ACTIONS)


def test_repo_root_links_point_at_bundled() -> None:
    assert (ROOT / "rules").resolve() == BUNDLED_RULES
    assert (ROOT / "playbooks").resolve() == BUNDLED_PLAYBOOKS


def test_check_paths_finds_no_problem(known_actions: dict[str, type[BaseModel]]) -> None:
    assert check_paths([BUNDLED_RULES, BUNDLED_PLAYBOOKS], known_actions) == []


def test_check_paths_classifies_single_files(known_actions: dict[str, type[BaseModel]]) -> None:
    files = sorted(BUNDLED_RULES.glob("*.yaml")) + sorted(BUNDLED_PLAYBOOKS.glob("*.yaml"))
    assert check_paths(files, known_actions) == []


def test_only_allowed_actions_are_used(defs: DefinitionSet) -> None:
    used = {s.action for p in defs.playbooks.values() for s in p.steps}
    used |= {s.revert.action for p in defs.playbooks.values() for s in p.steps if s.revert}
    assert used <= set(KNOWN_ACTIONS)


def test_alert_kinds(defs: DefinitionSet) -> None:
    assert defs.alert_kinds == {
        "GPUXidError": "xid",
        "GPUECCUncorrectableError": "ecc_dbe",
        "GPUECCCorrectableRateHigh": "ecc_sbe",
        "GPUTemperatureHigh": "thermal",
        "GPUTemperatureCritical": "thermal",
        "GPUPowerDrawHigh": "power",
        "GPUIdle": "idle",
        "GPUUtilizationLow": "idle",
        "GPUMemoryUsageHigh": "other",
    }


def _regex_codes(defs: DefinitionSet, rule_name: str) -> list[int]:
    [rule] = [r for r in defs.rules if r.name == rule_name]
    [matcher] = [m for m in rule.match if m.name == "xid"]
    assert matcher.op == "=~"
    return sorted(int(code) for code in matcher.value.split("|"))


def test_fatal_xid_regex_is_the_catalog_fatal_buckets(defs: DefinitionSet) -> None:
    expected = sorted(code for bucket in FATAL_BUCKETS for code in defs.xid.codes(bucket))
    assert _regex_codes(defs, "xid-fatal") == expected


def test_application_xid_regex_is_the_restart_app_bucket(defs: DefinitionSet) -> None:
    assert _regex_codes(defs, "xid-application") == defs.xid.codes("RESTART_APP")


@pytest.mark.parametrize(
    ("labels", "rule", "playbook"),
    [
        ({"alertname": "GPUXidError", "xid": "79"}, "xid-fatal", "quarantine-node"),
        ({"alertname": "GPUXidError", "xid": "48"}, "xid-fatal", "quarantine-node"),
        ({"alertname": "GPUXidError", "xid": "13"}, "xid-application", "notify-pods"),
        ({"alertname": "GPUXidError", "xid": "63"}, None, None),
        ({"alertname": "GPUXidError", "xid": "999"}, None, None),
        ({"alertname": "GPUECCUncorrectableError"}, "ecc-uncorrectable", "quarantine-node"),
        ({"alertname": "GPUECCCorrectableRateHigh"}, "ecc-correctable-rate", "observe-node"),
        ({"alertname": "GPUTemperatureHigh"}, "thermal-high", "record-event"),
        ({"alertname": "GPUTemperatureCritical"}, "thermal-high", "record-event"),
        ({"alertname": "GPUPowerDrawHigh"}, "power-draw-high", "record-event"),
        ({"alertname": "GPUIdle"}, "gpu-idle", "record-event"),
        ({"alertname": "GPUUtilizationLow"}, "gpu-idle", "record-event"),
        ({"alertname": "GPUMemoryUsageHigh"}, None, None),
    ],
)
def test_shipped_rule_for_alert(
    defs: DefinitionSet, labels: dict[str, str], rule: str, playbook: str
) -> None:
    matches = match_rules(labels, defs.rules)
    if rule is None:
        assert matches == []
        return
    assert matches[0].rule.name == rule
    assert matches[0].rule.playbook == playbook


def _variables(
    defs: DefinitionSet, alertname: str, xid: int | None, params: dict[str, Any]
) -> dict[str, Any]:
    info = defs.xid.lookup(xid) if xid is not None else None
    return {
        "alert": {
            "name": alertname,
            "status": "firing",
            "kind": defs.alert_kinds.get(alertname, "other"),
            "labels": {"alertname": alertname},
            "annotations": {},
            "starts_at": "2024-01-01T00:00:00+00:00",
            "fingerprint": "abc",
            "summary": f"{alertname} fired",
        },
        "gpu": {"uuid": "GPU-1", "index": "0", "pci_bus_id": None, "model": None, "device": None},
        "node": {"name": "gpu-node-1"},
        "xid": {
            "code": xid,
            "resolution": info.resolution if info else None,
            "cause": info.cause if info else None,
            "description": info.description if info else None,
            "recovery_action": None,
        },
        "context": {"pods": [], "pod_source": "test"},
        "params": params,
        "steps": {},
        "target": {
            "kind": "node",
            "key": "node:gpu-node-1",
            "node": "gpu-node-1",
            "gpu_uuid": "GPU-1",
            "namespace": None,
        },
    }


@pytest.mark.parametrize(
    ("alertname", "xid"),
    [
        ("GPUXidError", 79),
        ("GPUXidError", 13),
        ("GPUECCUncorrectableError", None),
        ("GPUECCCorrectableRateHigh", None),
        ("GPUTemperatureCritical", None),
        ("GPUPowerDrawHigh", None),
        ("GPUIdle", None),
    ],
)
def test_every_step_renders_to_valid_params(defs: DefinitionSet, alertname: str, xid: int | None) -> None:
    labels = {"alertname": alertname, **({"xid": str(xid)} if xid is not None else {})}
    [match, *_] = match_rules(labels, defs.rules)
    playbook = defs.playbooks[match.rule.playbook]
    variables = _variables(defs, alertname, xid, {**playbook.params, **match.params})
    for step in playbook.steps:
        if step.when:
            compile_condition(step.when).evaluate(variables)
        rendered = render_params(step.params, variables)
        KNOWN_ACTIONS[step.action].model_validate(rendered)
        if step.revert:
            KNOWN_ACTIONS[step.revert.action].model_validate(render_params(step.revert.params, variables))


def test_quarantine_taint_values(defs: DefinitionSet) -> None:
    playbook = defs.playbooks["quarantine-node"]
    taint = playbook.steps[0]
    for alertname, xid, expected in (
        ("GPUXidError", 79, "xid-79"),
        ("GPUECCUncorrectableError", None, "ecc-dbe"),
    ):
        labels = {"alertname": alertname, **({"xid": str(xid)} if xid else {})}
        [match, *_] = match_rules(labels, defs.rules)
        variables = _variables(defs, alertname, xid, {**playbook.params, **match.params})
        assert render_params(taint.params, variables) == {
            "key": "remediator.io/gpu-unhealthy",
            "value": expected,
            "effect": "NoSchedule",
        }
    drain = render_params(
        playbook.steps[2].params, _variables(defs, "GPUXidError", 79, dict(playbook.params))
    )
    assert drain == {"pods": "gpu", "grace_period": 300, "timeout": "30m", "skip_namespaces": ["kube-system"]}
    assert playbook.on_resolved == "revert"


def test_playbooks_round_trip_through_json(defs: DefinitionSet) -> None:
    for playbook in defs.playbooks.values():
        assert type(playbook).model_validate(playbook.model_dump(mode="json")) == playbook


def test_version_is_stable_and_tracks_content(tmp_path: Path, defs: DefinitionSet) -> None:
    again = load_definitions(BUNDLED_RULES, BUNDLED_PLAYBOOKS, KNOWN_ACTIONS)
    assert again.version == defs.version
    rules, playbooks = tmp_path / "rules", tmp_path / "playbooks"
    rules.mkdir()
    playbooks.mkdir()
    for src, dst in ((BUNDLED_RULES, rules), (BUNDLED_PLAYBOOKS, playbooks)):
        for file in src.glob("*.yaml"):
            (dst / file.name).write_text(file.read_text())
    copy = load_definitions(rules, playbooks, KNOWN_ACTIONS)
    assert copy.version == defs.version
    assert copy.sources == defs.sources
    (rules / "gpu-power.yaml").write_text((rules / "gpu-power.yaml").read_text() + "\n# changed\n")
    assert load_definitions(rules, playbooks, KNOWN_ACTIONS).version != defs.version


def test_rules_dir_without_data_files_uses_bundled_catalog(tmp_path: Path) -> None:
    rules, playbooks = tmp_path / "rules", tmp_path / "playbooks"
    rules.mkdir()
    playbooks.mkdir()
    (rules / "gpu-xid.yaml").write_text((BUNDLED_RULES / "gpu-xid.yaml").read_text())
    for file in BUNDLED_PLAYBOOKS.glob("*.yaml"):
        (playbooks / file.name).write_text(file.read_text())
    defs = load_definitions(rules, playbooks, KNOWN_ACTIONS)
    assert defs.xid.lookup(79).resolution == "RESTART_BM"
    assert defs.alert_kinds["GPUIdle"] == "idle"
    assert "bundled/xid-catalog.yaml" in defs.sources
