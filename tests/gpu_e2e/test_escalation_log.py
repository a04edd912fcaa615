"""Each climb of the escalation ladder (reset -> reboot -> replace) is one WARNING line of the controller's log
naming the node and the GPU: after a failed gate, and after a fault that came back within the window.

Controller on the strict fake API server, a real sidecar on fake NVML, the bundled definitions.
"""

from __future__ import annotations

import logging

import pytest

from tests.engine.conftest import Cluster
from tests.gpu_e2e.conftest import NODE, GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.gpu_e2e.test_reset import trainers
from tests.gpu_e2e.test_return_to_service import Clock, remediations
from tests.helpers import am_alert, am_payload
from tests.sidecar.fakenvml import gpu_uuid

LADDER_LOG = "remediator.engine.ladder"


def escalation_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LADDER_LOG and r.levelno == logging.WARNING and r.getMessage().startswith("escalation:")]


async def test_a_failed_gate_logs_the_climb_with_node_and_gpu(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LADDER_LOG)
    trainers(gpu_node)
    gpu_node.sidecar.nvml.set("gpu.0.remap.pending", 1)
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="119"))))
    await cluster.settle()

    first, second = await remediations(cluster)
    assert (first["playbook"], second["playbook"]) == ("reset-gpu", "reboot-node")
    [line] = escalation_lines(caplog)
    assert line.startswith(f"escalation: reset-gpu -> reboot-node on node {NODE} GPU {gpu_uuid(0)} ")
    assert f"(remediation {first['id']} -> {second['id']})" in line
    assert "gate failed: step validate failed: " in line and "remapped_rows.pending" in line


async def test_a_recurrence_logs_the_climb_with_node_and_gpu(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LADDER_LOG)
    trainers(gpu_node)
    cluster: Cluster = await gpu_cluster()
    clock = Clock(cluster)
    labels = gpu_alert_labels("GPUXidError", 1, xid="48", err_code="48")
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()
    assert escalation_lines(caplog) == []  # a first run is not an escalation

    clock.advance(600)
    again = am_alert(labels, starts_at="2026-12-02T10:10:00Z")
    again["fingerprint"] = "0000000000000048"
    await cluster.post(am_payload(again))
    await cluster.settle()
    reset, reboot = await remediations(cluster)
    assert reboot["rule"] == "escalation:recurrence"
    [line] = escalation_lines(caplog)
    assert line.startswith(f"escalation: reset-gpu -> reboot-node on node {NODE} GPU {gpu_uuid(1)} ")
    assert f"(remediation {reset['id']} -> a new one)" in line and "came back 600s after" in line
