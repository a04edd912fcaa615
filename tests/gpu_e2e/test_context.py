"""The context of a GPU remediation: that GPU's pods from the node sidecar, or every GPU pod of the node.

Which source was used is recorded (`pod_source`); a sidecar that cannot be reached never stops a
remediation from being admitted, it only widens a `gpu:<uuid>` drain to every GPU pod of the node.
"""

from __future__ import annotations

from tests.engine.conftest import Cluster
from tests.gpu_e2e.conftest import GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.helpers import am_alert, am_payload
from tests.sidecar.fakenvml import gpu_uuid


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
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    two_jobs(gpu_node)
    cluster: Cluster = await gpu_cluster(reachable=False)
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
    # ... and the reset, which needs the sidecar, failed and left the node quarantined.
    assert rem["state"] == "failed" and "step reset failed" in rem["state_reason"]
    assert gpu_node.cordoned()


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
