"""A GPU that needs a reset (Xid 119, RESET_GPU): taint, drain only that GPU's pods, reset through the sidecar.

The reset is refused while a process still holds the GPU: the step fails naming it, the remediation fails
and the node keeps its taint and cordon for a human. Without one, the GPU is reset, checked, and the node is
put back exactly as it was.
"""

from __future__ import annotations

from typing import Any

from tests.engine.conftest import Cluster
from tests.gpu_e2e.conftest import GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.helpers import am_alert, am_payload
from tests.sidecar.fakenvml import gpu_uuid

TAINT = {"key": "remediator.io/gpu-unhealthy", "value": "xid-119", "effect": "NoSchedule"}


def trainers(node: GpuNode) -> None:
    """trainer-0 on GPU 0 and trainer-1 on GPU 1, one Deployment, each with one process on its GPU."""
    deployment = node.fake.add_deployment("trainer", "ml")
    rs = node.fake.add_replicaset("trainer-abc", "ml", replicas=2, deployment=deployment)
    node.add_gpu_pod("trainer-0", 0, pid=4100, owner=rs)
    node.add_gpu_pod("trainer-1", 1, pid=4101, owner=rs)


def forward(rem: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["name"], s["status"]) for s in rem["steps"] if s["phase"] == "forward"]


async def test_reset_is_refused_while_a_process_holds_the_gpu_and_the_taint_stays(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    trainers(gpu_node)
    gpu_node.sidecar.add_process(0, 4999, "0::/system.slice/stuck-job.service\n")  # outlives the drain
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="119"))))
    await cluster.settle()

    assert gpu_node.evicted() == ["trainer-0"]  # only GPU 0's pod
    rem = await cluster.only_remediation()
    assert (rem["rule"], rem["playbook"], rem["state"]) == ("xid-reset-gpu", "reset-gpu", "failed")
    assert forward(rem) == [
        ("taint", "succeeded"), ("condition", "succeeded"), ("drain", "succeeded"), ("reset", "failed"),
    ]
    [reset] = [s for s in rem["steps"] if s["name"] == "reset"]
    assert f"{gpu_uuid(0)} is still in use: pid 4999" in reset["error"]
    assert "step reset failed" in rem["state_reason"]
    assert gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2") == 0
    assert TAINT in gpu_node.taints() and gpu_node.cordoned()

    # The alert resolving does not lift the quarantine of a GPU that was never reset.
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="119"), status="resolved")))
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "failed"
    assert TAINT in gpu_node.taints() and gpu_node.cordoned()


async def test_reset_succeeds_once_the_gpu_is_free_and_the_node_returns_to_service(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    trainers(gpu_node)
    foreign = {"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}
    gpu_node.fake.write("nodes", None, gpu_node.name, {"spec": {"taints": [foreign]}})
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="119"))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded", rem["state_reason"]
    assert forward(rem) == [
        ("taint", "succeeded"), ("condition", "succeeded"), ("drain", "succeeded"), ("reset", "succeeded"),
        ("validate", "succeeded"), ("verify", "succeeded"), ("healthy", "succeeded"), ("untaint", "succeeded"),
        ("uncordon", "succeeded"), ("event", "succeeded"),
    ]
    assert gpu_node.evicted() == ["trainer-0"]
    assert gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2") == 1
    steps = {s["name"]: s for s in rem["steps"]}
    assert steps["reset"]["output"]["post_check"]["healthy"] is True
    assert steps["verify"]["output"]["gpu"]["uuid"] == gpu_uuid(0)
    assert steps["verify"]["output"]["pods"]["pods"] == []
    assert gpu_node.taints() == [foreign] and not gpu_node.cordoned()
    node = gpu_node.fake.node(gpu_node.name) or {}
    assert not [k for k in {**node["metadata"].get("labels", {}), **node["metadata"].get("annotations", {})}
                if k.startswith("remediator.io/")]
    guardrails = (await cluster.api.get("/api/v1/guardrails")).json()
    assert guardrails["circuit_breaker"]["quarantined"] == 0  # the playbook lifted its own quarantine

    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="119"), status="resolved")))
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "succeeded"


async def test_a_node_cordoned_before_stays_cordoned_after_a_reset(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    trainers(gpu_node)
    gpu_node.fake.write("nodes", None, gpu_node.name, {"spec": {"unschedulable": True}})
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUECCUncorrectableError", 1))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert (rem["rule"], rem["state"]) == ("ecc-uncorrectable", "succeeded")
    assert ("uncordon", "skipped") in forward(rem)
    assert gpu_node.evicted() == ["trainer-1"]
    assert gpu_node.cordoned() and not gpu_node.taints()
