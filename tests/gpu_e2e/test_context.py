"""The context of a GPU remediation: that GPU's pods from the node sidecar, or every GPU pod of the node.

Which source was used is recorded (`pod_source`); a sidecar that cannot be reached never stops a
remediation from being admitted, it only widens a `gpu:<uuid>` drain to every GPU pod of the node. A step
that needs the sidecar waits for it (a transient failure, never a failed step) and goes on once it answers.
"""

from __future__ import annotations

from tests.engine.conftest import Cluster
from tests.gpu_e2e.conftest import GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.gpu_e2e.test_gate_unknown import Agent, agent_down  # noqa: F401  (fixture)
from tests.gpu_e2e.test_return_to_service import Clock
from tests.helpers import am_alert, am_payload
from tests.sidecar.fakenvml import gpu_uuid

TAINT = {"key": "remediator.io/gpu-unhealthy", "value": "xid-46", "effect": "NoSchedule"}


def two_jobs(node: GpuNode) -> None:
    """train-0 (Deployment) running on GPU 0; infer-0 (bare pod) allocated GPU 1 without a process."""
    deployment = node.fake.add_deployment("train", "ml")
    rs = node.fake.add_replicaset("train-abc", "ml", replicas=1, deployment=deployment)
    node.add_gpu_pod("train-0", 0, pid=4200, owner=rs)
    node.add_gpu_pod("infer-0", 1)


async def test_with_the_sidecar_the_context_holds_the_pods_of_the_affected_gpu(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    two_jobs(gpu_node)
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="46"))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    context = rem["context"]
    assert context["pod_source"] == "sidecar" and "sidecar_error" not in context
    assert gpu_node.fake.pod("ml", "infer-0") is not None  # still there: not on the affected GPU
    [entry] = context["gpu_pods"][gpu_uuid(0)]
    assert (entry["namespace"], entry["name"], entry["active"]) == ("ml", "train-0", True)
    [pod] = context["pods"]
    assert (pod["name"], pod["gpu"], pod["active"]) == ("train-0", gpu_uuid(0), True)
    assert [o["kind"] for o in pod["owners"]] == ["ReplicaSet", "Deployment"]
    assert gpu_node.evicted() == ["train-0"]


async def test_without_the_sidecar_the_node_level_gpu_pods_are_used_and_the_reason_recorded(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode, agent_down: Agent  # noqa: F811
) -> None:
    two_jobs(gpu_node)
    cluster: Cluster = await gpu_cluster(port=agent_down.port)
    clock = Clock(cluster)
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="46"))))
    await cluster.settle(60)

    rem = await cluster.only_remediation()
    context = rem["context"]
    assert context["pod_source"] == "node"
    assert "unreachable" in context["sidecar_error"] and "gpu_pods" not in context
    assert sorted(p["name"] for p in context["pods"]) == ["infer-0", "train-0"]
    # Admitted and run: the drain could not tell the GPUs apart, so it moved every GPU pod of the node ...
    assert gpu_node.evicted() == ["infer-0", "train-0"]
    [drain] = [s for s in rem["steps"] if s["name"] == "drain"]
    assert "unknown" in drain["output"]["note"]
    # ... and the reset, which needs the sidecar, waits for it (retries: 0: at once): not failed, not a crash,
    # nothing reset, the node still quarantined.
    assert (rem["playbook"], rem["state"]) == ("reset-gpu", "running")
    assert rem["state_reason"].startswith("waiting: node agent unreachable since "), rem["state_reason"]
    assert [(s["name"], s["status"]) for s in rem["steps"]][-1] == ("reset", "running")
    assert rem["crashes"] == 0
    assert gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2") == 0
    assert TAINT in gpu_node.taints() and gpu_node.cordoned()
    audit = (await cluster.api.get("/api/v1/audit", params={"remediation": rem["id"]})).json()
    [waiting] = [a["data"] for a in audit if a["kind"] == "remediation.waiting"]
    assert waiting["dependency"] == "node agent" and waiting["reason"] == rem["state_reason"]

    # The agent is back: at the next look the reset runs and the node returns to service.
    agent_down.up()
    clock.advance(cluster.settings.dependency_recheck_s)
    await cluster.settle(60)
    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded", rem["state_reason"]
    assert [(s["name"], s["status"]) for s in rem["steps"] if s["name"] in ("reset", "validate")] == [
        ("reset", "succeeded"), ("validate", "succeeded")]
    assert gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2") == 1
    assert TAINT not in gpu_node.taints() and not gpu_node.cordoned()
    audit = (await cluster.api.get("/api/v1/audit", params={"remediation": rem["id"]})).json()
    assert [a["kind"] for a in audit if a["kind"].startswith("remediation.")].count("remediation.resumed") == 1


async def test_without_the_sidecar_the_pod_the_exporter_names_is_the_gpus_pod(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    """dcgm-exporter's pod mapping (kept on the alert by the shipped Xid rules) names the GPU's pod when the
    node agent cannot answer: the context says so (pod_source exporter, also in the audit) and narrows to it."""
    two_jobs(gpu_node)
    cluster: Cluster = await gpu_cluster(reachable=False)
    labels = gpu_alert_labels("GPUXidError", 0, xid="13", exported_pod="train-0", exported_namespace="ml",
                              exported_container="main", pod="nvidia-dcgm-exporter-7x2kq", namespace="gpu-operator")
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle(60)

    rem = await cluster.only_remediation()
    context = rem["context"]
    assert context["pod_source"] == "exporter" and "unreachable" in context["sidecar_error"]
    assert context["gpu_pods"][gpu_uuid(0)] == [
        {"namespace": "ml", "name": "train-0", "uid": context["pods"][0]["uid"], "active": None}
    ]
    [pod] = context["pods"]  # infer-0 (GPU 1) is not this GPU's pod
    assert (pod["name"], pod["gpu"], pod["from_alert"]) == ("train-0", gpu_uuid(0), True)
    assert [o["kind"] for o in pod["owners"]] == ["ReplicaSet", "Deployment"]
    audit = (await cluster.api.get("/api/v1/audit", params={"remediation": rem["id"]})).json()
    assert [a["data"]["source"] for a in audit if a["kind"] == "context.gathered"] == ["exporter"]


async def test_with_both_sources_the_sidecar_wins_and_the_exporters_pod_is_recorded(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    two_jobs(gpu_node)
    cluster: Cluster = await gpu_cluster()
    # A stale mapping: the exporter still names infer-0, the kubelet (through the sidecar) says train-0.
    labels = gpu_alert_labels("GPUXidError", 0, xid="13", pod="infer-0", namespace="ml", container="main")
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()

    rem = await cluster.only_remediation()
    context = rem["context"]
    assert context["pod_source"] == "sidecar" and context["exporter_pod"] == "ml/infer-0"
    assert [p["name"] for p in context["gpu_pods"][gpu_uuid(0)]] == ["train-0"]
