"""The dcgm-exporter counters file the project ships (deploy/monitoring/dcgm-exporter-counters.yaml) enables exactly
the DCGM fields the shipped alert rules read, and every field a rule reads is exported either by dcgm-exporter's
default counters file (a copy with its source in tests/deploy/data) or by the shipped file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.deploy.helpers import MONITORING
from tests.deploy.promql import metric_names

DEFAULT_COUNTERS = Path(__file__).parent / "data" / "dcgm-exporter-default-counters.csv"
SHIPPED = MONITORING / "dcgm-exporter-counters.yaml"
# Read by the thermal and power-brake rules beside DCGM_FI_DEV_CLOCKS_EVENT_REASONS for exporters built on a DCGM
# that predates the rename; go-dcgm maps the old name to the same field (id 112), so the file enables one.
ALIASES = {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}


def fields(csv_text: str) -> dict[str, str]:
    """field -> Prometheus type of a counters file, as dcgm-exporter reads it ('#' lines are comments)."""
    found: dict[str, str] = {}
    for number, line in enumerate(csv_text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [part.strip() for part in line.split(",", 2)]
        assert len(parts) == 3 and all(parts), f"line {number}: field, type, help: {line!r}"
        assert parts[1] in {"gauge", "counter", "label"}, f"line {number}: type {parts[1]!r}"
        assert parts[0] not in found, f"line {number}: {parts[0]} twice"
        found[parts[0]] = parts[1]
    return found


def shipped() -> dict[str, Any]:
    doc = yaml.safe_load(SHIPPED.read_text())
    assert isinstance(doc, dict)
    return doc


def rule_fields() -> set[str]:
    doc = yaml.safe_load((MONITORING / "rules.yml").read_text())
    read = set().union(*(metric_names(rule["expr"]) for group in doc["groups"] for rule in group["rules"]))
    return {ALIASES.get(name, name) for name in read if name.startswith("DCGM_")}


def test_the_copy_of_the_default_file_names_its_source() -> None:
    head = DEFAULT_COUNTERS.read_text().splitlines()[:4]
    assert "github.com/NVIDIA/dcgm-exporter/blob/4.5.3-4.8.2/etc/default-counters.csv" in head[1]
    assert "691c92762eb551313c825f6efe4ceeee20982801" in head[2]
    assert "DCGM_FI_DEV_XID_ERRORS" in fields(DEFAULT_COUNTERS.read_text())


def test_the_shipped_file_is_a_configmap_the_gpu_operator_mounts() -> None:
    doc = shipped()
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "ConfigMap")
    assert doc["metadata"]["name"] == "gpu-remediator-dcgm-counters"
    assert doc["metadata"]["namespace"] == "gpu-operator"
    assert list(doc["data"]) == ["dcgm-metrics.csv"], "the key the GPU Operator mounts (dcgmExporter.config.name)"
    assert "dcgmExporter.config.name=gpu-remediator-dcgm-counters" in SHIPPED.read_text()


def test_every_field_a_rule_reads_is_exported_by_default_or_by_the_shipped_file() -> None:
    default = set(fields(DEFAULT_COUNTERS.read_text()))
    enabled = set(fields(shipped()["data"]["dcgm-metrics.csv"]))
    missing = rule_fields() - default - enabled
    assert not missing, f"read by the rules, exported by neither file: {sorted(missing)}"


def test_the_shipped_file_enables_exactly_the_fields_the_rules_read() -> None:
    enabled = fields(shipped()["data"]["dcgm-metrics.csv"])
    assert set(enabled) == rule_fields()
    default = fields(DEFAULT_COUNTERS.read_text())
    for name, kind in enabled.items():
        if name in default:
            assert kind == default[name], f"{name}: {kind}, the default file says {default[name]}"
    off_by_default = set(enabled) - set(default)
    assert off_by_default == {
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_RETIRED_PENDING",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "DCGM_EXP_XID_ERRORS_COUNT",
    }


def test_the_counters_file_can_fail() -> None:
    """The checks above would see a field the rules read that neither file exports."""
    default = set(fields(DEFAULT_COUNTERS.read_text()))
    enabled = set(fields(shipped()["data"]["dcgm-metrics.csv"])) - {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
    assert rule_fields() - default - enabled == {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}


# The rule on a field off by default whose fallback is elsewhere: the exporter's Xid counter (the node sidecar's own
# GPUXidError rule counts every Xid).
FALLBACK_ELSEWHERE = {"GPUXidError"}


def test_each_rule_on_a_field_off_by_default_falls_back_on_the_sidecar() -> None:
    default = set(fields(DEFAULT_COUNTERS.read_text()))
    doc = yaml.safe_load((MONITORING / "rules.yml").read_text())
    checked = set()
    for group in doc["groups"]:
        for rule in group["rules"]:
            read = metric_names(rule["expr"])
            off = {ALIASES.get(n, n) for n in read if n.startswith("DCGM_")} - default
            if not off or rule["alert"] in FALLBACK_ELSEWHERE:
                continue
            assert any(n.startswith("gpu_remediator_") for n in read), (rule["alert"], sorted(off))
            assert " or\n" in rule["expr"] or "\nor\n" in rule["expr"], rule["alert"]
            checked.add(rule["alert"])
    assert checked == {
        "GPUECCUncorrectableError", "GPUECCCorrectableRateHigh", "GPUPowerDrawHigh", "GPUThermalSlowdown",
        "GPUPowerBrakeSlowdown", "GPURowRemapPending", "GPURetiredPagesPending", "GPURecoveryActionRequired",
        "GPUNVLinkErrors",
    }
