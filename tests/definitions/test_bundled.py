"""The shipped rules and playbooks load cleanly, match the alerts they are for, and render valid params."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from remediator.actions.registry import default_registry
from remediator.definitions import DefinitionSet, check_paths, load_definitions
from remediator.definitions.conditions import compile_condition
from remediator.definitions.loader import BUNDLED_PLAYBOOKS, BUNDLED_RULES
from remediator.definitions.matching import match_rules
from remediator.definitions.templates import render_params
from remediator.definitions.xid import RESOLUTIONS
from remediator.domain.xid_decode import DECODED_ACTIONS
from remediator.engine.planning import EMPTY_ESCALATION, match_labels
from remediator.intake.normalize import GpuAlert

# The shipped playbooks are checked against the real actions' parameter models.
KNOWN_ACTIONS: dict[str, type[BaseModel]] = {name: a.Params for name, a in default_registry().items()}

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def defs() -> DefinitionSet:
    return load_definitions(BUNDLED_RULES, BUNDLED_PLAYBOOKS, KNOWN_ACTIONS)


def test_repo_root_links_point_at_bundled() -> None:
    assert (ROOT / "rules").resolve() == BUNDLED_RULES
    assert (ROOT / "playbooks").resolve() == BUNDLED_PLAYBOOKS


def test_check_paths_finds_no_problem() -> None:
    assert check_paths([BUNDLED_RULES, BUNDLED_PLAYBOOKS], KNOWN_ACTIONS) == []


def test_check_paths_classifies_single_files() -> None:
    files = sorted(BUNDLED_RULES.glob("*.yaml")) + sorted(BUNDLED_PLAYBOOKS.glob("*.yaml"))
    assert check_paths(files, KNOWN_ACTIONS) == []


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
        "GPULost": "other",
        "GPUMemoryTemperatureHigh": "thermal",
        "GPUThermalSlowdown": "thermal",
        "GPUPowerBrakeSlowdown": "power",
        "GPURowRemapFailure": "ecc_dbe",
        "GPURowRemapPending": "ecc_dbe",
        "GPURetiredPagesPending": "ecc_dbe",
        "GPUUncorrectableRemappedRows": "ecc_dbe",
        "GPUNVLinkErrors": "other",
        "GPUPCIeReplayRateHigh": "other",
        "GPUPCIeLinkDegraded": "other",
        "GPUOrphanedMemory": "idle",
        "GPURecoveryActionRequired": "other",
        "GPUNVSwitchFatalSXid": "other",
        "GPUDriverFailure": "other",
    }


# Every immediate action an Xid can ask for -> (rule, playbook) of the shipped rules; None: nothing starts.
ACTION_ROUTES: dict[str, tuple[str, str] | None] = {
    "RESET_GPU": ("xid-reset-gpu", "reset-gpu"),
    "WORKFLOW_XID_48": ("xid-reset-gpu", "reset-gpu"),
    "DRAIN_AND_RESET": ("xid-reset-gpu", "reset-gpu"),
    "RESTART_BM": ("xid-reboot-node", "reboot-node"),
    "RESTART_VM": ("xid-restart-vm", "reboot-node"),
    "DRAIN_P2P": ("xid-drain-p2p", "quarantine-node"),
    "RESTART_APP": ("xid-application", "notify-pods"),
    "XID_154_EVAL": ("xid-application", "notify-pods"),
    "RESTART_FM": ("xid-fabric-manager", "observe-node"),
    "IGNORE": None,
    **{
        bucket: ("xid-needs-human", "observe-node")
        for bucket in ("CONTACT_SUPPORT", "CHECK_MECHANICALS", "UPDATE_SWFW", "CHECK_UVM", "WORKFLOW_NVLINK_ERR",
                       "WORKFLOW_NVLINK5_ERR", "WORKFLOW_XID_45", "XID_154")
    },
}


def _xid_alert(labels: dict[str, str]) -> GpuAlert:
    return GpuAlert(alertname=labels.get("alertname", ""), status="firing", fingerprint="f", kind="xid",
                    node="gpu-1", node_source="Hostname", xid=int(labels["xid"]) if "xid" in labels else None,
                    labels=labels)


def _route(defs: DefinitionSet, labels: dict[str, str]) -> tuple[str, str] | None:
    matches = match_rules(match_labels(_xid_alert(labels), defs), defs.rules)
    return (matches[0].rule.name, matches[0].rule.playbook) if matches else None


def test_every_action_a_bucket_or_decode_gives_has_a_route() -> None:
    assert set(RESOLUTIONS) | set(DECODED_ACTIONS) == set(ACTION_ROUTES)


@pytest.mark.parametrize("code", range(1, 173))
def test_every_catalog_code_routes_by_its_action(defs: DefinitionSet, code: int) -> None:
    # Without a message the decoded codes keep their workflow bucket (a person reads the message).
    expected = ACTION_ROUTES[defs.xid.lookup(code).resolution]
    assert _route(defs, {"alertname": "GPUXidError", "xid": str(code)}) == expected


@pytest.mark.parametrize(
    ("code", "message", "action"),
    [
        (45, "Ch 00000001 caused by previous Xid 149", "IGNORE"),
        (45, "Ch 00000008", "RESTART_FM"),
        (74, "NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "CONTACT_SUPPORT"),
        (74, "NVLink: fatal error detected on link 3(0x100, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)", "CHECK_MECHANICALS"),
        (74, "NVLink: fatal error detected on link 3(0x800001, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)", "IGNORE"),
        (149, "NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001 0x0 0x0 0x0 0x0)", "IGNORE"),
        (149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x0 0x0 0x0 0x0)", "RESET_GPU"),
        (145, "RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x040988e2 0x00000008 0x0 0x0 0x0 0x0)", "XID_154_EVAL"),
        (154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "RESTART_BM"),
        (154, "GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", "DRAIN_P2P"),
        (154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "DRAIN_AND_RESET"),
        (154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "IGNORE"),
    ],
)
def test_decoded_xids_route_by_their_message(defs: DefinitionSet, code: int, message: str, action: str) -> None:
    labels = {"alertname": "GPUXidError", "xid": str(code), "err_msg": message}
    assert match_labels(_xid_alert(labels), defs)["xid_action"] == action
    assert _route(defs, labels) == ACTION_ROUTES[action]


def test_the_sources_decoded_action_wins(defs: DefinitionSet) -> None:
    # The node detector labels what it decoded; the controller does not decode again.
    labels = {"alertname": "GPUXidError", "xid": "145", "xid_action": "RESET_GPU"}
    assert _route(defs, labels) == ("xid-reset-gpu", "reset-gpu")


def test_catalog_follows_nvidias_current_catalog(defs: DefinitionSet) -> None:
    assert defs.xid.lookup(160).resolution == "IGNORE"  # Blackwell channel retirement: informational
    assert defs.xid.lookup(108).resolution == "IGNORE"
    assert all(code in defs.xid.entries for code in range(1, 173))
    assert defs.xid.lookup(167).mnemonic == "PCIE_FATAL_TIMEOUT"
    assert defs.xid.lookup(167).resolution == "RESTART_BM"
    assert defs.xid.lookup(169).resolution == "RESET_GPU"


def test_thermal_rules_have_no_cooldown(defs: DefinitionSet) -> None:
    # A GPU that heats up again right after its cap was restored must be capped again at once.
    thermal = [r for r in defs.rules if r.name in ("thermal-high", "thermal-critical")]
    assert len(thermal) == 2 and all(r.cooldown is None for r in thermal)


@pytest.mark.parametrize(
    ("labels", "rule", "playbook"),
    [
        ({"alertname": "GPUXidError", "xid": "79"}, "xid-reboot-node", "reboot-node"),
        ({"alertname": "GPUXidError", "xid": "167"}, "xid-reboot-node", "reboot-node"),
        ({"alertname": "GPUXidError", "xid": "160"}, None, None),
        ({"alertname": "GPUXidError", "xid": "162"}, None, None),
        ({"alertname": "GPUXidError", "xid": "74"}, "xid-needs-human", "observe-node"),
        ({"alertname": "GPUXidError", "xid": "145"}, "xid-needs-human", "observe-node"),
        ({"alertname": "GPUXidError", "xid": "151"}, "xid-restart-vm", "reboot-node"),
        ({"alertname": "GPUXidError", "xid": "45"}, "xid-needs-human", "observe-node"),
        ({"alertname": "GPUXidError", "xid": "108"}, None, None),
        ({"alertname": "GPURecoveryActionRequired", "recovery_action": "1"}, "recovery-action-reset", "reset-gpu"),
        ({"alertname": "GPURecoveryActionRequired", "recovery_action": "2"}, "recovery-action-reboot",
         "reboot-node"),
        ({"alertname": "GPURecoveryActionRequired", "recovery_action": "3"}, "recovery-action-drain-p2p",
         "quarantine-node"),
        ({"alertname": "GPURecoveryActionRequired", "recovery_action": "4"}, "recovery-action-reset", "reset-gpu"),
        ({"alertname": "GPURecoveryActionRequired", "recovery_action": "0"}, None, None),
        ({"alertname": "GPUNVSwitchFatalSXid", "sxid": "20034"}, "nvswitch-fatal-sxid", "quarantine-nvswitch-gpus"),
        ({"alertname": "GPUDriverFailure", "kind": "gpu_init_failed", "UUID": "GPU-1"}, "driver-gpu-init-failed",
         "quarantine-node"),
        ({"alertname": "GPUDriverFailure", "kind": "gpu_init_failed"}, "driver-gpu-init-failed", "quarantine-node"),
        ({"alertname": "GPUDriverFailure", "kind": "reset_required", "UUID": "GPU-1"}, "driver-reset-required",
         "reset-gpu"),
        ({"alertname": "GPUDriverFailure", "kind": "reset_required"}, "driver-reset-required-node",
         "quarantine-node"),
        ({"alertname": "GPUDriverFailure", "kind": "nvlink_rx_detect"}, "driver-nvlink-failure", "reboot-node"),
        ({"alertname": "GPUDriverFailure", "kind": "nvlink_training_failed"}, "driver-nvlink-failure",
         "reboot-node"),
        ({"alertname": "GPUDriverFailure", "kind": "fallen_off_bus"}, None, None),
        ({"alertname": "GPUXidError", "xid": "94", "gpu_instance": "5"}, "xid-mig-contained", "drain-gpu-instance"),
        ({"alertname": "GPUXidError", "xid": "94"}, "xid-application", "notify-pods"),
        ({"alertname": "GPUXidError", "xid": "95", "gpu_instance": "5"}, "xid-reset-gpu", "reset-gpu"),
        ({"alertname": "GPUXidError", "xid": "169"}, "xid-reset-gpu", "reset-gpu"),
        ({"alertname": "GPUXidError", "xid": "48"}, "xid-reset-gpu", "reset-gpu"),
        ({"alertname": "GPUXidError", "xid": "119"}, "xid-reset-gpu", "reset-gpu"),
        ({"alertname": "GPUXidError", "xid": "13"}, "xid-application", "notify-pods"),
        ({"alertname": "GPUXidError", "xid": "63"}, None, None),
        ({"alertname": "GPUXidError", "xid": "999"}, "xid-needs-human", "observe-node"),
        ({"alertname": "GPUECCUncorrectableError"}, "ecc-uncorrectable", "reset-gpu"),
        ({"alertname": "GPUECCCorrectableRateHigh"}, "ecc-correctable-rate", "observe-node"),
        ({"alertname": "GPUTemperatureHigh"}, "thermal-high", "power-cap-gpu"),
        ({"alertname": "GPUTemperatureCritical"}, "thermal-critical", "power-cap-gpu-hard"),
        ({"alertname": "GPULost"}, "gpu-lost", "reboot-node"),
        ({"alertname": "GPURowRemapFailure"}, "row-remap-failure", "rma-gpu"),
        ({"alertname": "GPURowRemapPending"}, "row-remap-pending", "reset-gpu"),
        ({"alertname": "GPURetiredPagesPending"}, "retired-pages-pending", "reset-gpu"),
        ({"alertname": "GPUUncorrectableRemappedRows"}, "uncorrectable-remapped-rows", "observe-node"),
        ({"alertname": "GPUNVLinkErrors"}, "nvlink-errors", "observe-node"),
        ({"alertname": "GPUPCIeReplayRateHigh"}, "pcie-replay-rate", "observe-node"),
        ({"alertname": "GPUPCIeLinkDegraded"}, "pcie-link-degraded", "observe-node"),
        ({"alertname": "GPUMemoryTemperatureHigh"}, "hbm-temperature", "observe-node"),
        ({"alertname": "GPUThermalSlowdown"}, "thermal-slowdown", "observe-node"),
        ({"alertname": "GPUPowerBrakeSlowdown"}, "power-brake", "observe-node"),
        ({"alertname": "GPUOrphanedMemory"}, "orphaned-memory", "reclaim-orphaned-memory"),
        ({"alertname": "GPUPowerDrawHigh"}, "power-draw-high", "record-event"),
        ({"alertname": "GPUIdle"}, "gpu-idle", "reclaim-idle-gpu"),
        ({"alertname": "GPUUtilizationLow"}, "gpu-underused", "record-event"),
        ({"alertname": "GPUMemoryUsageHigh"}, None, None),
    ],
)
def test_shipped_rule_for_alert(
    defs: DefinitionSet, labels: dict[str, str], rule: str, playbook: str
) -> None:
    matches = match_rules(match_labels(_xid_alert(labels), defs), defs.rules)
    if rule is None:
        assert matches == []
        return
    assert matches[0].rule.name == rule
    assert matches[0].rule.playbook == playbook


GPU = "GPU-8e6a1c2d-0000-4000-8000-000000000001"


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
        "gpu": {"uuid": GPU, "index": "0", "pci_bus_id": None, "model": None, "device": None},
        "node": {"name": "gpu-node-1"},
        "xid": {
            "code": xid,
            "resolution": info.resolution if info else None,
            "cause": info.cause if info else None,
            "description": info.description if info else None,
            "recovery_action": None,
        },
        "context": {"pods": [], "pod_source": "test", "node": {"boot_id": "b0a1e7d2-0000-4000-8000-000000000001"}},
        "params": params,
        # what earlier steps report, for steps that read them (the idle playbook's quota step)
        "steps": {"scale": {"namespace": "research", "freed": {"nvidia.com/gpu": 2}, "gpus_freed": 2}},
        "escalation": dict(EMPTY_ESCALATION),
        "target": {
            "kind": "node",
            "key": "node:gpu-node-1",
            "node": "gpu-node-1",
            "gpu_uuid": GPU,
            "gpu_instance": None,
            "namespace": None,
        },
    }


@pytest.mark.parametrize(
    ("alertname", "xid"),
    [
        ("GPUXidError", 79),
        ("GPUXidError", 119),
        ("GPUXidError", 13),
        ("GPUECCUncorrectableError", None),
        ("GPUECCCorrectableRateHigh", None),
        ("GPUTemperatureHigh", None),
        ("GPUTemperatureCritical", None),
        ("GPUPowerDrawHigh", None),
        ("GPUIdle", None),
        ("GPUUtilizationLow", None),
        ("GPUXidError", 74),
        ("GPULost", None),
        ("GPURowRemapFailure", None),
        ("GPURowRemapPending", None),
        ("GPUNVLinkErrors", None),
        ("GPUOrphanedMemory", None),
        ("GPUXidError", 151),
        ("GPUXidError", 45),
        ("GPURecoveryActionRequired", None),
        ("GPUNVSwitchFatalSXid", None),
        ("GPUDriverFailure", None),
    ],
)
def test_every_step_renders_to_valid_params(defs: DefinitionSet, alertname: str, xid: int | None) -> None:
    labels = {"alertname": alertname, **({"xid": str(xid)} if xid is not None else {})}
    if alertname == "GPURecoveryActionRequired":
        labels["recovery_action"] = "2"
    if alertname == "GPUNVSwitchFatalSXid":
        labels.update(sxid="20034", pci_bus_id="0000:06:00.0", link="48")
    variants = [labels]
    if alertname == "GPUDriverFailure":
        variants = [{**labels, "kind": kind, **({"UUID": GPU} if uuid else {})}
                    for kind in ("gpu_init_failed", "reset_required", "nvlink_rx_detect", "nvlink_training_failed")
                    for uuid in (True, False)]
    for variant in variants:
        [match, *_] = match_rules(match_labels(_xid_alert(variant), defs), defs.rules)
        playbook = defs.playbooks[match.rule.playbook]
        variables = _variables(defs, alertname, xid, {**playbook.params, **match.params})
        for step in (*playbook.steps, *playbook.return_gate):
            if step.when:
                compile_condition(step.when).evaluate(variables)
            rendered = render_params(step.params, variables)
            KNOWN_ACTIONS[step.action].model_validate(rendered)
            if step.revert:
                KNOWN_ACTIONS[step.revert.action].model_validate(render_params(step.revert.params, variables))


def _rendered(defs: DefinitionSet, alertname: str, xid: int | None, step: str) -> dict[str, Any]:
    labels = {"alertname": alertname, **({"xid": str(xid)} if xid else {})}
    [match, *_] = match_rules(match_labels(_xid_alert(labels), defs), defs.rules)
    playbook = defs.playbooks[match.rule.playbook]
    variables = _variables(defs, alertname, xid, {**playbook.params, **match.params})
    found = playbook.step(step)
    assert found is not None
    return render_params(found.params, variables)


def _rendered_sxid(defs: DefinitionSet) -> dict[str, dict[str, Any]]:
    playbook = defs.playbooks["quarantine-nvswitch-gpus"]
    variables = _variables(defs, "GPUNVSwitchFatalSXid", None, dict(playbook.params))
    variables["alert"]["labels"] = {"alertname": "GPUNVSwitchFatalSXid", "sxid": "20034", "pci_bus_id": "0000:06:00.0"}
    variables["gpu"] = {"uuid": None, "index": None, "pci_bus_id": None, "model": None, "device": None}
    rendered = {step.name: render_params(step.params, variables) for step in (*playbook.steps, *playbook.return_gate)}
    assert rendered["validate"]["gpu"] == "all"
    assert "no NVSwitch topology" in playbook.description
    return rendered


def test_quarantine_taint_values(defs: DefinitionSet) -> None:
    for alertname, xid, expected in (
        ("GPUXidError", 79, "xid-79"),
        ("GPUXidError", 119, "xid-119"),
        ("GPUECCUncorrectableError", None, "ecc-dbe"),
    ):
        assert _rendered(defs, alertname, xid, "taint") == {
            "key": "remediator.io/gpu-unhealthy",
            "value": expected,
            "effect": "NoSchedule",
        }
    common = {"grace_period": 300, "timeout": "30m", "skip_namespaces": ["kube-system"]}
    assert _rendered(defs, "GPUXidError", 79, "drain") == {"pods": "gpu", **common}
    assert _rendered(defs, "GPUXidError", 119, "drain") == {"pods": f"gpu:{GPU}", **common}
    sxid = _rendered_sxid(defs)
    assert sxid["taint"] == {"key": "remediator.io/gpu-unhealthy", "value": "sxid-20034", "effect": "NoSchedule"}
    assert sxid["drain"] == {"pods": "gpu", **common}  # every GPU pod of the node: no NVSwitch topology
    quarantine = defs.playbooks["quarantine-node"]
    drain_step = next(s for s in quarantine.steps if s.name == "drain")
    drain = render_params(drain_step.params, _variables(defs, "GPUXidError", 79, dict(quarantine.params)))
    assert drain == {"pods": "gpu", **common}
    assert quarantine.on_resolved == "revert"


def test_what_happens_when_the_alert_resolves(defs: DefinitionSet) -> None:
    # A capped GPU gets its limit back; a GPU reset is not undone by a quiet counter; a node lost until a
    # reboot is returned to service when its alert resolves, which the shipped rule does after the reboot.
    assert defs.playbooks["power-cap-gpu"].on_resolved == "revert"
    assert defs.playbooks["reset-gpu"].on_resolved == "keep"
    assert defs.playbooks["reboot-node"].on_resolved == "revert"
    # The hard cap stays when the critical alert resolves: the high-temperature remediation restores.
    assert defs.playbooks["power-cap-gpu-hard"].on_resolved == "keep"
    assert defs.playbooks["power-cap-gpu-hard"].step("cap").revert is False
    assert defs.playbooks["rma-gpu"].on_resolved == "keep"


def test_power_cap_is_a_percent_of_the_default_clamped_into_range(defs: DefinitionSet) -> None:
    capped = {"clamp": True, "only_lower": True}  # never raise a limit someone set lower
    assert _rendered(defs, "GPUTemperatureHigh", None, "cap") == {"percent_of_default": 80, **capped}
    assert _rendered(defs, "GPUTemperatureCritical", None, "cap") == {"percent_of_default": 60, **capped}


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
