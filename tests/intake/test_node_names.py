"""A node label that is not a valid node name leaves the alert without a node, and says why."""

from __future__ import annotations

import pytest

from remediator.intake.normalize import normalize

PRECEDENCE = ["node", "kubernetes_node", "Hostname", "instance"]


def _node(labels: dict[str, str]) -> tuple[str | None, str | None]:
    alert = normalize(
        {"alertname": "GPUXidError", **labels}, {}, status="firing", fingerprint="f", kinds={},
        node_precedence=PRECEDENCE,
    )
    return alert.node, alert.node_problem


@pytest.mark.parametrize(
    "value", [".", "..", "a/b", "x,spec.nodeName=y", "gpu_node", "GPU-Node-1", "-n1", "n" * 254, "a..b"]
)
def test_an_invalid_node_name_is_no_node_with_a_reason(value: str) -> None:
    node, problem = _node({"Hostname": value})
    assert node is None
    assert problem is not None and problem.startswith("label Hostname: ") and "RFC 1123 subdomain" in problem


@pytest.mark.parametrize("value", ["gpu-node-1", "gpu-1.rack-2.example", "n" * 253, "127.0.0.5"])
def test_valid_node_names_pass(value: str) -> None:
    assert _node({"Hostname": value}) == (value, None)


def test_a_node_resolved_from_an_instance_address_is_checked_too() -> None:
    assert _node({"instance": "127.0.0.5:9400"}) == ("127.0.0.5", None)
    node, problem = _node({"instance": "[::1]:9400"})
    assert node is None and problem is not None and problem.startswith("label instance: ")


def test_an_alert_without_node_labels_has_no_problem_to_report() -> None:
    assert _node({"gpu": "0"}) == (None, None)
