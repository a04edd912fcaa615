"""The controller's alerts about itself: promtool unit tests, annotations, series, and routing to people."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml

from tests.deploy.helpers import MONITORING, only, rendered, require_binary
from tests.deploy.promql import metric_names
from tests.deploy.test_dashboards import controller_series

GROUP = "gpu-remediator.controller"
ALERTS = {
    "RemediatorControllerDown",
    "RemediatorControllerNotReady",
    "RemediatorWebhookErrors",
    "RemediatorWebhookUnavailable",
    "RemediatorRemediationStuck",
    "RemediatorAlertsUndecided",
    "RemediatorDatabaseUnavailable",
    "RemediatorWaitingOnDependency",
    "RemediatorNotificationsFailing",
    "RemediatorApprovalWaiting",
    "RemediatorCircuitBreakerTripped",
    "RemediatorPaused",
    "RemediatorDefinitionsRefused",
    "RemediatorAuditVerifyFailed",
    "RemediatorSidecarUnreachable",
}
# Prometheus's own `up`, and kube-state-metrics' Deployment series (docs/metrics/workload/deployment-metrics.md).
OTHER_SERIES = {"up", "kube_deployment_status_replicas_unavailable"}


def controller_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "rules.yml").read_text())
    (group,) = [g for g in doc["groups"] if g["name"] == GROUP]
    return list(group["rules"])


def test_promtool_unit_tests_of_the_controller_rules_pass() -> None:
    promtool = require_binary("promtool", "prometheus")
    done = subprocess.run(
        [promtool, "test", "rules", "rules_controller_test.yml"],
        capture_output=True, text=True, timeout=120, check=False, cwd=MONITORING,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_controller_alert_is_unit_tested_firing() -> None:
    tests = yaml.safe_load((MONITORING / "rules_controller_test.yml").read_text())
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert fired == ALERTS


def test_controller_alerts_carry_severity_summary_and_description() -> None:
    rules = controller_rules()
    assert {r["alert"] for r in rules} == ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


def test_controller_alerts_read_only_series_that_exist() -> None:
    allowed = controller_series() | OTHER_SERIES
    for rule in controller_rules():
        names = metric_names(rule["expr"])
        assert names and names <= allowed, (rule["alert"], names - allowed)


def routed_to_controller(alertname: str) -> bool:
    plain = yaml.safe_load((MONITORING / "alertmanager.yml").read_text())
    (route,) = [r for r in plain["route"]["routes"] if r["receiver"] == "gpu-remediator"]
    (matcher,) = route["matchers"]
    found = re.fullmatch(r'alertname=~"([^"]+)"', matcher)
    assert found is not None
    crd = only(rendered(MONITORING), "AlertmanagerConfig")
    (crd_matcher,) = crd["spec"]["route"]["matchers"]
    return any(re.fullmatch(regex, alertname) for regex in (found.group(1), crd_matcher["value"]))


def test_controller_alerts_go_to_people_not_to_the_controller() -> None:
    assert routed_to_controller("GPUXidError"), "the check sees the controller's route"
    for alert in ALERTS:
        assert not routed_to_controller(alert), alert
