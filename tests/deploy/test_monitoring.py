"""The shipped alert rules, Alertmanager wiring, ServiceMonitor and Grafana dashboard."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.helpers import MONITORING, NAMESPACE, OVERLAYS, load_script, only, rendered, require_binary
from tests.deploy.promql import grouping_labels, metric_names

render_rules = load_script(MONITORING / "render_rules.py")

CONTRACT_ALERTS = {
    "GPUXidError",
    "GPUECCUncorrectableError",
    "GPUECCCorrectableRateHigh",
    "GPUTemperatureHigh",
    "GPUTemperatureCritical",
    "GPUPowerDrawHigh",
    "GPUIdle",
    "GPUUtilizationLow",
    "GPUMemoryUsageHigh",
    "GPULost",
}
# Alerts the rules raise beyond CONTRACT_ALERTS: the failure modes a GPU fleet has.
FAILURE_MODE_ALERTS = {
    "GPUMemoryTemperatureHigh",
    "GPUThermalSlowdown",
    "GPUPowerBrakeSlowdown",
    "GPURowRemapFailure",
    "GPURowRemapPending",
    "GPURetiredPagesPending",
    "GPUUncorrectableRemappedRows",
    "GPUNVLinkErrors",
    "GPUPCIeReplayRateHigh",
    "GPUPCIeLinkDegraded",
    "GPUOrphanedMemory",
    "GPURecoveryActionRequired",
    "GPUNVSwitchFatalSXid",
    "GPUDriverFailure",
}
ROUTED_ALERTS = CONTRACT_ALERTS | FAILURE_MODE_ALERTS
# Every alert identifies the GPU by these (Hostname copied from the main branch's `hostname`).
GPU_LABELS = ["Hostname", "UUID", "gpu", "pci_bus_id"]
# Alerts about a workload also name its pod (the exported_* labels are folded into these).
WORKLOAD_LABELS = [*GPU_LABELS, "modelName", "pod", "namespace", "container"]
WORKLOAD_ALERTS = {"GPUIdle", "GPUUtilizationLow"}
DCGM_METRICS = {
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
}
# The node sidecar's series (docs/sidecar.md) and Prometheus's own ALERTS (the thermal hysteresis).
SIDECAR_METRICS = {
    "gpu_remediator_temperature_slowdown_celsius",
    "gpu_remediator_recovery_action",
    "gpu_remediator_remapped_rows_pending",
    "gpu_remediator_remapped_rows_failure",
    "gpu_remediator_pcie_link_width",
    "gpu_remediator_pcie_link_width_max",
    "gpu_remediator_pcie_link_generation",
    "gpu_remediator_pcie_link_generation_max",
    "gpu_remediator_orphaned_memory_bytes",
    "gpu_remediator_ecc_uncorrected_volatile",
    "gpu_remediator_ecc_corrected_volatile",
    "gpu_remediator_clock_event_reasons",
    "gpu_remediator_retired_pages_pending",
    "gpu_remediator_power_usage_watts",
    "gpu_remediator_power_limit_watts",
    "gpu_remediator_nvlink_errors_total",
    "gpu_remediator_xid_events_total",
    "gpu_remediator_xid_events_created",
    "gpu_remediator_gpu_lost",
    "gpu_remediator_gpus_expected",
    "gpu_remediator_gpus_visible",
    "ALERTS",
}
CONTROLLER_METRICS = {
    "remediator_alerts_received_total": "counter",
    "remediator_webhook_duration_seconds": "histogram",
    "remediator_remediations_total": "counter",
    "remediator_remediations_active": "gauge",
    "remediator_step_duration_seconds": "histogram",
    "remediator_guardrail_trips_total": "counter",
    "remediator_paused": "gauge",
    "remediator_definitions_last_reload_success": "gauge",
    "remediator_notifications_total": "counter",
    "remediator_webhook_unavailable_total": "counter",
    "remediator_oldest_active_seconds": "gauge",
    "remediator_audit_verify_ok": "gauge",
}
# The effectiveness metrics (issue 15) the dashboard shows; they land in remediator/process/metrics.py in a
# parallel change. Once they are there, test_controller_metric_names_match_the_code checks their kinds; then
# move them into CONTROLLER_METRICS.
EFFECTIVENESS_METRICS = {
    "remediator_time_to_quarantine_seconds": "histogram",
    "remediator_time_to_return_seconds": "histogram",
    "remediator_recurrences_total": "counter",
    "remediator_remediation_outcomes_total": "counter",
}
WEBHOOK_URL = "http://gpu-remediator.gpu-remediator.svc:8080/api/v1/alerts"

_DURATION = {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h|d|w|y))+$"}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
PROMETHEUS_RULE_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "rules": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["alert", "expr"],
                                    "properties": {
                                        "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": _DURATION,
                                        "labels": _STRINGS,
                                        "annotations": _STRINGS,
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _STRINGS},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                        },
                    },
                },
            },
        },
    },
}
ALERTMANAGER_CONFIG_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1alpha1"},
        "kind": {"const": "AlertmanagerConfig"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["route", "receivers"],
            "properties": {
                "route": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["receiver"],
                    "properties": {
                        "receiver": {"type": "string"},
                        "matchers": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["name", "value"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "value": {"type": "string"},
                                    "matchType": {"enum": ["=", "!=", "=~", "!~"]},
                                },
                            },
                        },
                        "groupBy": {"type": "array", "items": {"type": "string"}},
                        "groupWait": _DURATION,
                        "groupInterval": _DURATION,
                        "repeatInterval": _DURATION,
                        "continue": {"type": "boolean"},
                    },
                },
                "receivers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "webhookConfigs": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["url"],
                                    "properties": {
                                        "url": {"type": "string"},
                                        "sendResolved": {"type": "boolean"},
                                        "maxAlerts": {"type": "integer", "minimum": 0},
                                        "httpConfig": {
                                            "type": "object",
                                            "additionalProperties": False,
                                            "properties": {
                                                "authorization": {
                                                    "type": "object",
                                                    "additionalProperties": False,
                                                    "required": ["credentials"],
                                                    "properties": {
                                                        "type": {"type": "string"},
                                                        "credentials": {
                                                            "type": "object",
                                                            "additionalProperties": False,
                                                            "required": ["name", "key"],
                                                            "properties": {
                                                                "name": {"type": "string"},
                                                                "key": {"type": "string"},
                                                            },
                                                        },
                                                    },
                                                }
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def monitoring_objects() -> tuple[dict[str, Any], ...]:
    return rendered(MONITORING)


SIDECAR_GROUP = "gpu-remediator-sidecar"
CONTROLLER_GROUP = "gpu-remediator.controller"
# gpu_instance is present only on an Xid the driver attributes to a MIG GPU instance: without it the label set is
# the one dcgm-exporter's GPUXidError carries; xid_action likewise only where the node detector decoded the message.
SIDECAR_XID_LABELS = ["Hostname", "UUID", "gpu", "pci_bus_id", "xid", "gpu_instance", "xid_action"]


def all_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "rules.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def rules() -> list[dict[str, Any]]:
    """The rules on dcgm-exporter's series (every group but the node sidecar's and the controller's own)."""
    doc = yaml.safe_load((MONITORING / "rules.yml").read_text())
    return [
        rule
        for group in doc["groups"]
        if group["name"] not in {SIDECAR_GROUP, CONTROLLER_GROUP}
        for rule in group["rules"]
    ]


def sidecar_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "rules.yml").read_text())
    (group,) = [g for g in doc["groups"] if g["name"] == SIDECAR_GROUP]
    assert doc["groups"][-1] is group, "the sidecar group comes last"
    return list(group["rules"])


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=MONITORING)


# -- offline checks with the real tools ------------------------------------------------------------


def test_promtool_accepts_the_rules_file() -> None:
    promtool = require_binary("promtool", "prometheus")
    # GPUXidError is defined several times on purpose (DCGM's series and the sidecar's kernel-log counter), with
    # identical labels so that Alertmanager merges the two into one alert; the gauge's rule and its decoded
    # codes' rule (err_msg kept) share their static labels too. Those are the only duplicates.
    lint = run([promtool, "check", "rules", "rules.yml"])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "2 duplicate rule(s) found.\nMetric: GPUXidError\n" in lint.stdout + lint.stderr, lint.stderr
    assert (lint.stdout + lint.stderr).count("Metric: ") == (lint.stdout + lint.stderr).count("Metric: GPUXidError")
    done = run([promtool, "check", "rules", "--lint=none", "rules.yml"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(all_rules())} rules found" in done.stdout


def test_promtool_unit_tests_of_the_alert_rules_pass() -> None:
    promtool = require_binary("promtool", "prometheus")
    done = run([promtool, "test", "rules", "rules_test.yml"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_of_the_sidecar_rules_pass() -> None:
    promtool = require_binary("promtool", "prometheus")
    done = run([promtool, "test", "rules", "rules_sidecar_test.yml"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_of_the_fallbacks_pass() -> None:
    """Each rule on a field dcgm-exporter's default file leaves off fires from the exporter's series and from
    the node sidecar's own reading alone (rules_fallback_test.yml)."""
    promtool = require_binary("promtool", "prometheus")
    done = run([promtool, "test", "rules", "rules_fallback_test.yml"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_can_fail(tmp_path: Any) -> None:
    promtool = require_binary("promtool", "prometheus")
    tests = yaml.safe_load((MONITORING / "rules_test.yml").read_text())
    xid = next(t for t in tests["tests"] if t["name"].startswith("Xid 79"))
    xid["alert_rule_test"][1]["exp_alerts"][0]["exp_labels"]["xid"] = "48"
    tests["rule_files"] = [str(MONITORING / "rules.yml")]
    (tmp_path / "broken_test.yml").write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [promtool, "test", "rules", "broken_test.yml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert 'xid="79"' in done.stdout + done.stderr


def test_amtool_accepts_the_alertmanager_config() -> None:
    amtool = require_binary("amtool", "prometheus-alertmanager")
    done = run([amtool, "check-config", "alertmanager.yml"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


# -- rules -----------------------------------------------------------------------------------------


def test_rules_file_is_the_prometheus_rule_rendered() -> None:
    assert (MONITORING / "rules.yml").read_text() == render_rules.render(), (
        "run: python deploy/monitoring/render_rules.py"
    )
    rule = only(monitoring_objects(), "PrometheusRule")
    assert yaml.safe_load((MONITORING / "rules.yml").read_text()) == {"groups": rule["spec"]["groups"]}


def test_prometheus_rule_is_structurally_valid() -> None:
    rule = only(monitoring_objects(), "PrometheusRule")
    jsonschema.validate(rule, PROMETHEUS_RULE_SCHEMA)
    assert rule["metadata"]["namespace"] == NAMESPACE


def test_rules_raise_the_contract_and_failure_mode_alert_names() -> None:
    names = [rule["alert"] for rule in rules()]
    # GPUXidError has two rules: the gauge (both exporter shapes) and the counter DCGM_EXP_XID_ERRORS_COUNT;
    # the node sidecar's group adds GPULost (and its own GPUXidError).
    assert set(names) - {"GPULost", "GPUDriverFailure"} == ROUTED_ALERTS - {
        "GPULost", "GPUNVSwitchFatalSXid", "GPUDriverFailure"}
    assert names.count("GPUXidError") >= 2


def test_rules_use_only_dcgm_exporter_and_sidecar_metrics() -> None:
    for rule in rules():
        used = metric_names(rule["expr"])
        assert used, rule["alert"]
        assert used <= DCGM_METRICS | SIDECAR_METRICS, (rule["alert"], used - DCGM_METRICS - SIDECAR_METRICS)
    assert "DCGM_FI_DEV_DBE_VOL_TOTAL" not in (MONITORING / "rules.yml").read_text(), "not a dcgm-exporter metric"


def test_rules_keep_the_gpu_identity_and_the_workload_pod() -> None:
    for rule in rules():
        clauses = grouping_labels(rule["expr"])
        assert clauses, f"{rule['alert']}: aggregate to the GPU identity"
        for keyword, labels in clauses:
            assert keyword == "by", f"{rule['alert']}: `without` could drop labels silently"
            if labels == ["UUID"]:
                continue  # a per-GPU threshold joined on UUID
            wanted = WORKLOAD_LABELS if rule["alert"] in WORKLOAD_ALERTS else GPU_LABELS
            missing = [label for label in wanted if label not in labels]
            assert not missing, f"{rule['alert']} aggregates away {missing}"


def test_rules_normalise_the_lower_case_hostname() -> None:
    for rule in rules():
        for selector in re.findall(r"\b(DCGM_\w+|gpu_remediator_\w+)\b", rule["expr"]):
            assert 'label_replace(' in rule["expr"] and '"hostname"' in rule["expr"], (rule["alert"], selector)


def test_no_rule_takes_the_exporter_pod_for_the_workload() -> None:
    for rule in rules():
        if is_dcgm_xid_rule(rule):
            continue  # both spellings kept verbatim; the controller picks (test_xid_alert_keeps_the_exporters_pod)
        if rule["alert"] not in WORKLOAD_ALERTS:
            assert "pod" not in [label for _, labels in grouping_labels(rule["expr"]) for label in labels]
            continue
        assert 'exported_pod!=""' in rule["expr"]
        assert 'pod!~"nvidia-dcgm-exporter-.*|dcgm-exporter-.*"' in rule["expr"]


def test_xid_alert_carries_the_code_and_the_sidecar_label_set() -> None:
    gauge, counter = [rule for rule in rules() if rule["alert"] == "GPUXidError"][:2]
    assert gauge["labels"] == {"severity": "critical", "xid": "{{ $value }}"}
    assert metric_names(gauge["expr"]) == {"DCGM_FI_DEV_XID_ERRORS"}
    assert "== 79" in gauge["expr"] and "== 167" in gauge["expr"] and "== 160" not in gauge["expr"]
    assert re.search(r"changes\(DCGM_FI_DEV_XID_ERRORS\{err_code=\"\"\}\[", gauge["expr"]), "old shape: a change"
    assert 'unless on (UUID, err_code)' in gauge["expr"], "err_code shape: a new series"
    assert counter["labels"] == {"severity": "critical"}
    assert metric_names(counter["expr"]) == {"DCGM_EXP_XID_ERRORS_COUNT"}
    for rule in (gauge, counter):
        for _, labels in grouping_labels(rule["expr"]):
            assert set(labels) - {"xid"} - set(EXPORTER_ATTRIBUTION) == set(GPU_LABELS), (
                "the sidecar's GPUXidError labels, plus the exporter's pod attribution"
            )


DECODED_CODES_REGEX = "45|74|144|145|146|147|148|149|150|154"


def test_decoded_xid_codes_keep_err_msg_and_stand_aside_for_the_sidecar() -> None:
    """The codes NVIDIA decodes from the message (remediator.domain.xid_decode.DECODED_CODES) carry dcgm-exporter's
    err_msg into the alert, and only they: the other codes' alert keeps the label set the sidecar's merges on.
    Where the sidecar counted the code on that GPU, its alert (with xid_action) is the one."""
    from remediator.domain.xid_decode import DECODED_CODES

    assert set(DECODED_CODES_REGEX.split("|")) == {str(code) for code in DECODED_CODES}
    gauge, _, decoded = [rule for rule in rules() if is_dcgm_xid_rule(rule)]
    assert f'err_code!~"{DECODED_CODES_REGEX}"' in gauge["expr"]
    assert "err_msg" not in gauge["expr"]
    assert decoded["expr"].count(f'err_code=~"{DECODED_CODES_REGEX}"') == 2
    for _, labels in grouping_labels(decoded["expr"]):
        assert set(labels) == set(GPU_LABELS) | set(EXPORTER_ATTRIBUTION) | {"err_msg"}, labels
    assert "unless on (UUID, err_code)\n    label_replace(" in decoded["expr"]
    assert '"err_code", "$1", "xid", "(.+)"' in decoded["expr"]
    assert decoded["for"] == "1m"
    assert decoded["labels"] == {"severity": "critical", "xid": "{{ $value }}"}


# dcgm-exporter's pod mapping: the pod using the GPU, as honorLabels true and false spell it.
EXPORTER_ATTRIBUTION = ["pod", "namespace", "container", "exported_pod", "exported_namespace", "exported_container"]


def is_dcgm_xid_rule(rule: dict[str, Any]) -> bool:
    return rule["alert"] == "GPUXidError" and bool(metric_names(rule["expr"]) & DCGM_METRICS)


def test_xid_alert_keeps_the_exporters_pod_in_both_spellings() -> None:
    """Every aggregation of the DCGM Xid rules keeps the pod dcgm-exporter attributes the GPU to, so the
    workload reaches the remediation when the node agent cannot say (remediator/actions/context.py)."""
    found = [rule for rule in rules() if is_dcgm_xid_rule(rule)]
    assert len(found) == 3
    for rule in found:
        for keyword, labels in grouping_labels(rule["expr"]):
            assert keyword == "by" and set(EXPORTER_ATTRIBUTION) <= set(labels), (rule["expr"], labels)


@pytest.mark.parametrize(
    ("alert", "threshold", "duration"),
    [
        ("GPUTemperatureHigh", ">= 83", "1m"),
        ("GPUTemperatureHigh", ">= 73", "1m"),
        ("GPUTemperatureCritical", "- 3", "30s"),
        ("GPUTemperatureCritical", "+ 86", "30s"),
        ("GPUIdle", "< 5", "30m"),
        ("GPUUtilizationLow", "< 30", "1h"),
    ],
)
def test_thresholds_and_durations(alert: str, threshold: str, duration: str) -> None:
    (rule,) = [rule for rule in rules() if rule["alert"] == alert]
    assert threshold in rule["expr"]
    assert rule["for"] == duration


def test_every_rule_has_severity_and_summary() -> None:
    for rule in rules():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]


# -- Alertmanager ----------------------------------------------------------------------------------


def alertmanager() -> dict[str, Any]:
    return yaml.safe_load((MONITORING / "alertmanager.yml").read_text())


def remediator_route(config: dict[str, Any]) -> dict[str, Any]:
    (route,) = [r for r in config["route"]["routes"] if r["receiver"] == "gpu-remediator"]
    return route


def regex_alternatives(value: str) -> set[str]:
    return set(value.split("|"))


def test_alertmanager_sends_the_contract_alerts_to_the_controller() -> None:
    config = alertmanager()
    route = remediator_route(config)
    (matcher,) = route["matchers"]
    found = re.fullmatch(r'alertname=~"([^"]+)"', matcher)
    assert found is not None
    assert regex_alternatives(found.group(1)) == ROUTED_ALERTS
    assert route["group_by"] == ["alertname", "Hostname", "UUID"]
    (receiver,) = [r for r in config["receivers"] if r["name"] == "gpu-remediator"]
    (webhook,) = receiver["webhook_configs"]
    assert webhook["url"] == WEBHOOK_URL
    assert webhook["send_resolved"] is True
    assert webhook["http_config"]["authorization"]["type"] == "Bearer"
    assert webhook["http_config"]["authorization"]["credentials_file"].startswith("/")
    assert "credentials" not in webhook["http_config"]["authorization"], "no token in the file itself"


def test_alertmanager_config_crd_is_structurally_valid_and_equivalent() -> None:
    crd = only(monitoring_objects(), "AlertmanagerConfig")
    jsonschema.validate(crd, ALERTMANAGER_CONFIG_SCHEMA)
    assert crd["metadata"]["namespace"] == NAMESPACE
    plain = remediator_route(alertmanager())
    route = crd["spec"]["route"]
    assert route["receiver"] == plain["receiver"]
    (matcher,) = route["matchers"]
    assert (matcher["name"], matcher["matchType"]) == ("alertname", "=~")
    assert regex_alternatives(matcher["value"]) == ROUTED_ALERTS
    assert route["groupBy"] == plain["group_by"]
    for camel, snake in (
        ("groupWait", "group_wait"),
        ("groupInterval", "group_interval"),
        ("repeatInterval", "repeat_interval"),
        ("continue", "continue"),
    ):
        assert route[camel] == plain[snake], camel
    (receiver,) = crd["spec"]["receivers"]
    (webhook,) = receiver["webhookConfigs"]
    (plain_receiver,) = [r for r in alertmanager()["receivers"] if r["name"] == receiver["name"]]
    (plain_webhook,) = plain_receiver["webhook_configs"]
    assert webhook["url"] == plain_webhook["url"] == WEBHOOK_URL
    assert webhook["sendResolved"] is plain_webhook["send_resolved"] is True
    auth = webhook["httpConfig"]["authorization"]
    assert auth["type"] == "Bearer"
    secret, key = plain_webhook["http_config"]["authorization"]["credentials_file"].split("/")[-2:]
    assert auth["credentials"] == {"name": secret, "key": key}


def test_alertmanager_token_is_the_controller_webhook_token() -> None:
    crd = only(monitoring_objects(), "AlertmanagerConfig")
    credentials = crd["spec"]["receivers"][0]["webhookConfigs"][0]["httpConfig"]["authorization"][
        "credentials"
    ]
    deployment = only(rendered(OVERLAYS["single"]), "Deployment")
    (main,) = deployment["spec"]["template"]["spec"]["containers"]
    (token,) = [e for e in main["env"] if e["name"] == "REMEDIATOR_WEBHOOK_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == credentials


# -- ServiceMonitor --------------------------------------------------------------------------------


def test_service_monitor_scrapes_the_controller_metrics() -> None:
    monitor = only(monitoring_objects(), "ServiceMonitor")
    jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)
    service = only(rendered(OVERLAYS["single"]), "Service", "gpu-remediator")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert all(service["metadata"]["labels"].get(k) == v for k, v in selector.items())
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"


# -- Grafana ---------------------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    return json.loads((MONITORING / "grafana-dashboard.json").read_text())


def panel_exprs(board: dict[str, Any]) -> list[str]:
    exprs = []
    panels = list(board["panels"])
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels", []))
        exprs.extend(target["expr"] for target in panel.get("targets", []))
    return exprs


def allowed_series() -> set[str]:
    names = set()
    for name, kind in {**CONTROLLER_METRICS, **EFFECTIVENESS_METRICS}.items():
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
        else:
            names.add(name)
    return names


def test_dashboard_queries_only_controller_metrics() -> None:
    board = dashboard()
    exprs = panel_exprs(board)
    assert exprs
    used: set[str] = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= allowed_series(), (expr, names - allowed_series())
        used |= names
    for name in CONTROLLER_METRICS:
        assert any(u == name or u.startswith(f"{name}_") for u in used), f"no panel shows {name}"


def test_dashboard_is_importable() -> None:
    board = dashboard()
    assert board["uid"] and board["title"]
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource"}
    ids = []
    panels = list(board["panels"])
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels", []))
        ids.append(panel["id"])
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert {t["refId"] for t in panel["targets"]} == {
                chr(65 + i) for i in range(len(panel["targets"]))
            }
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_dashboard_configmap_carries_the_json() -> None:
    configmap = only(monitoring_objects(), "ConfigMap", "gpu-remediator-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = configmap["data"].values()
    assert json.loads(text) == dashboard()


def test_controller_metric_names_match_the_code() -> None:
    from remediator.process.metrics import Metrics

    exposed = {}
    for family in Metrics().registry.collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        exposed[name] = family.type
    for name, kind in CONTROLLER_METRICS.items():
        assert exposed.get(name) == kind, (
            f"{name}: the controller exposes {exposed.get(name)!r}, not a {kind}"
        )
    for name, kind in EFFECTIVENESS_METRICS.items():
        assert exposed.get(name, kind) == kind, f"{name}: the controller exposes {exposed.get(name)!r}, not a {kind}"


# -- the node sidecar's rules and PodMonitor -----------------------------------------------------------

SIDECAR_DETECTOR_METRICS = {
    "gpu_remediator_xid_events_total",
    "gpu_remediator_xid_events_created",
    "gpu_remediator_kernel_events_total",
    "gpu_remediator_kernel_events_created",
    "gpu_remediator_sxid_events_total",
    "gpu_remediator_sxid_events_created",
    "gpu_remediator_gpu_lost",
    "gpu_remediator_gpus_visible",
    "gpu_remediator_gpus_expected",
}


def test_sidecar_rules_raise_xid_and_lost_alerts_on_sidecar_series() -> None:
    found = sidecar_rules()
    assert [r["alert"] for r in found] == ["GPUXidError", "GPUNVSwitchFatalSXid", "GPULost", "GPUDriverFailure"]
    for rule in found:
        assert metric_names(rule["expr"]) <= SIDECAR_DETECTOR_METRICS, rule["alert"]


def test_sidecar_xid_alert_has_exactly_the_labels_it_merges_on() -> None:
    """Alertmanager holds one alert per label set: the sidecar's and dcgm-exporter's GPUXidError for one
    Xid become one alert only when they carry the same labels, so the rule keeps exactly these."""
    (xid,) = [r for r in sidecar_rules() if r["alert"] == "GPUXidError"]
    groupings = grouping_labels(xid["expr"])
    assert groupings, "the rule aggregates (target labels such as pod and instance must go)"
    for keyword, labels in groupings:
        assert keyword == "by" and sorted(labels) == sorted(SIDECAR_XID_LABELS), labels
    assert xid["labels"] == {"severity": "critical"}
    assert "increase(gpu_remediator_xid_events_total[" in xid["expr"]
    assert "gpu_remediator_xid_events_created" in xid["expr"], "a new series (first event) fires too"


PODMONITOR_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "podMetricsEndpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _STRINGS},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "podMetricsEndpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "relabelings": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["targetLabel"],
                                    "properties": {
                                        "sourceLabels": {"type": "array", "items": {"type": "string"}},
                                        "targetLabel": {"type": "string"},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_pod_monitor_scrapes_the_sidecar_metrics() -> None:
    monitor = only(monitoring_objects(), "PodMonitor")
    jsonschema.validate(monitor, PODMONITOR_SCHEMA)
    daemonset = only(rendered(OVERLAYS["single"]), "DaemonSet", "gpu-remediator-sidecar")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [daemonset["metadata"]["namespace"]]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert endpoint["port"] in {p["name"] for p in container["ports"]}
    assert endpoint["path"] == "/metrics"
    instance = [r for r in endpoint["relabelings"] if r["targetLabel"] == "instance"]
    assert instance == [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"}]
    env = {e["name"]: e for e in container["env"]}
    assert env["REMEDIATOR_NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["REMEDIATOR_KMSG_PATH"]["value"] == "/dev/kmsg"
