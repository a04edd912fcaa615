"""A contained Xid on a MIG GPU instance moves that instance's pods only.

The node detector keeps the GPU instance an Xid line names (`GPU-I:05`) as the alert's `gpu_instance`; the
controller asks the node agent (a real sidecar on the fake NVML, MIG mode with two GPU instances) for the pods
of that instance's MIG device, records them in the context, and the shipped rule xid-mig-contained runs
drain-gpu-instance: the event and the drain reach the instance's pod, not its neighbour on the other instance
of the same GPU, nor the pod of the other GPU. The strict fake API server records every eviction.
"""

from __future__ import annotations

from typing import Any

from tests.engine.conftest import Cluster
from tests.gpu_e2e.conftest import GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.helpers import am_alert, am_payload
from tests.sidecar.conftest import FakePod
from tests.sidecar.fakenvml import gpu_uuid, mig_uuid

MIG = "nvidia.com/mig-3g.71gb"


def two_instances(node: GpuNode) -> dict[str, str]:
    """GPU 0 in MIG mode: GPU instance 3 (slice-a) and 5 (slice-b); GPU 1 whole (whole-0). Pod name -> uid."""
    nvml = node.sidecar.nvml
    nvml.set("gpu.0.mig_mode", 1)
    nvml.set("gpu.0.mig.count", 2)
    nvml.set("gpu.0.mig.0.uuid", mig_uuid(0, 0))
    nvml.set("gpu.0.mig.0.gi", 3)
    nvml.set("gpu.0.mig.1.uuid", mig_uuid(0, 1))
    nvml.set("gpu.0.mig.1.gi", 5)
    uids: dict[str, str] = {}
    for name, device, resource in (
        ("slice-a", mig_uuid(0, 0), MIG),
        ("slice-b", mig_uuid(0, 1), MIG),
        ("whole-0", gpu_uuid(1), "nvidia.com/gpu"),
    ):
        deployment = node.fake.add_deployment(name, "ml")
        rs = node.fake.add_replicaset(f"{name}-abc", "ml", replicas=1, deployment=deployment)
        if resource == MIG:
            pod = node.fake.add_pod(name, "ml", node=node.name, mig={"3g.71gb": 1}, owner=rs)
        else:
            pod = node.fake.add_pod(name, "ml", node=node.name, gpus=1, owner=rs)
        uids[name] = str(pod["metadata"]["uid"])
        node.kubelet_pods.append(FakePod("ml", name, uids[name], {"main": [device]}, resource=resource))
    node.sidecar.set_pods(node.kubelet_pods)
    return uids


def pod_events(node: GpuNode) -> list[str]:
    return sorted(
        str(c.body["involvedObject"]["name"])
        for c in node.fake.requests("create", "events")
        if c.ok and isinstance(c.body, dict) and c.body.get("involvedObject", {}).get("kind") == "Pod"
    )


async def test_a_contained_xid_on_a_gpu_instance_drains_only_that_instances_pods(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    uids = two_instances(gpu_node)
    cluster: Cluster = await gpu_cluster()
    labels = gpu_alert_labels("GPUXidError", 0, xid="94", gpu_instance="5")
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert (rem["rule"], rem["playbook"]) == ("xid-mig-contained", "drain-gpu-instance")
    context: dict[str, Any] = rem["context"]
    assert context["gpu_instance"] == 5 and context["instance_uuid"] == mig_uuid(0, 1)
    assert context["instance_pods"] == {
        f"{gpu_uuid(0)}/5": [{"namespace": "ml", "name": "slice-b", "uid": uids["slice-b"], "active": False}]
    }
    assert sorted(p["name"] for p in context["gpu_pods"][gpu_uuid(0)]) == ["slice-a", "slice-b"]
    assert gpu_node.evicted() == ["slice-b"]
    assert pod_events(gpu_node) == ["slice-b"]
    assert not gpu_node.cordoned() and gpu_node.taints() == []
    [drain] = [s for s in rem["steps"] if s["name"] == "drain"]
    assert drain["params"]["pods"] == f"instance:{gpu_uuid(0)}/5"
    assert rem["state"] == "succeeded", rem["state_reason"]


async def test_an_instance_the_agent_does_not_know_falls_back_to_the_gpus_pods(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    two_instances(gpu_node)
    cluster: Cluster = await gpu_cluster()
    labels = gpu_alert_labels("GPUXidError", 0, xid="94", gpu_instance="7")  # no MIG device of instance 7
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()

    rem = await cluster.only_remediation()
    context = rem["context"]
    assert context["gpu_instance"] == 7 and "instance_pods" not in context
    assert "no MIG device of GPU instance 7" in context["gpu_instance_error"]
    assert gpu_node.evicted() == ["slice-a", "slice-b"], "the whole GPU's pods, never the other GPU's"
    [drain] = [s for s in rem["steps"] if s["name"] == "drain"]
    assert "pods of GPU instance" in drain["output"]["note"] and "drained the pods of GPU" in drain["output"]["note"]
    assert pod_events(gpu_node) == [], "the event names only the instance's pods, and none were named"


async def test_an_xid_without_a_gpu_instance_keeps_the_application_path(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    two_instances(gpu_node)
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="94"))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert (rem["rule"], rem["playbook"]) == ("xid-application", "notify-pods")
    assert "gpu_instance" not in rem["context"]
    assert gpu_node.evicted() == []


async def remediations(cluster: Cluster) -> list[dict[str, Any]]:
    """Every remediation in detail, oldest first."""
    listed = (await cluster.api.get("/api/v1/remediations")).json()
    details = [(await cluster.api.get(f"/api/v1/remediations/{r['id']}")).json() for r in listed]
    return sorted(details, key=lambda r: str(r["created_at"]))


async def test_contained_xids_on_two_instances_of_one_gpu_start_two_remediations_each_draining_its_own(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    uids = two_instances(gpu_node)
    cluster: Cluster = await gpu_cluster()
    at_3 = gpu_alert_labels("GPUXidError", 0, xid="94", gpu_instance="3")
    at_5 = gpu_alert_labels("GPUXidError", 0, xid="94", gpu_instance="5")
    # A repeat on instance 5 (another alert of the same instance: the detector's line named another process).
    again_5 = gpu_alert_labels("GPUXidError", 0, xid="94", gpu_instance="05", err_msg="pid=4242")
    await cluster.post(am_payload(am_alert(at_3), am_alert(at_5), am_alert(again_5)))
    await cluster.settle()

    rems = await remediations(cluster)
    by_instance = {r["context"]["gpu_instance"]: r for r in rems}
    assert len(rems) == 2 and set(by_instance) == {3, 5}, [r["target"] for r in rems]
    for gi, pod in ((3, "slice-a"), (5, "slice-b")):
        rem = by_instance[gi]
        assert (rem["rule"], rem["playbook"], rem["state"]) == ("xid-mig-contained", "drain-gpu-instance",
                                                                "succeeded"), rem["state_reason"]
        assert rem["target"] == f"gpu_instance:{gpu_node.name}/{gpu_uuid(0)}/gi{gi}"
        [drain] = [s for s in rem["steps"] if s["name"] == "drain"]
        assert drain["params"]["pods"] == f"instance:{gpu_uuid(0)}/{gi}"
        assert [p["uid"] for p in drain["output"]["evicted"]] == [uids[pod]], drain["output"]
    assert by_instance[5]["linked_alerts"] == 1 and by_instance[3]["linked_alerts"] == 0
    assert gpu_node.evicted() == ["slice-a", "slice-b"], "each instance's pod evicted once, whole-0 never"
    assert pod_events(gpu_node) == ["slice-a", "slice-b"]
    assert not gpu_node.cordoned() and gpu_node.taints() == []


async def test_an_uncontained_xid_naming_an_instance_still_keys_on_the_whole_gpu(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    two_instances(gpu_node)
    cluster: Cluster = await gpu_cluster()
    on_3 = gpu_alert_labels("GPUXidError", 0, xid="95", gpu_instance="3")
    on_5 = gpu_alert_labels("GPUXidError", 0, xid="95", gpu_instance="5")
    await cluster.post(am_payload(am_alert(on_3), am_alert(on_5)))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert (rem["rule"], rem["playbook"]) == ("xid-reset-gpu", "reset-gpu")
    assert rem["target"] == f"gpu:{gpu_node.name}/{gpu_uuid(0)}" and rem["linked_alerts"] == 1


async def test_the_breaker_and_the_rate_limit_count_the_node_once_for_two_of_its_instances(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    """Room for one quarantined node and one quarantine start: the drains of two instances of one node's GPU
    hold that one node's room, so neither waits for the other."""
    two_instances(gpu_node)
    cluster: Cluster = await gpu_cluster(max_quarantined_nodes="1", quarantine_rate=1)
    await cluster.post(am_payload(
        am_alert(gpu_alert_labels("GPUXidError", 0, xid="94", gpu_instance="3")),
        am_alert(gpu_alert_labels("GPUXidError", 0, xid="94", gpu_instance="5")),
    ))
    await cluster.settle()

    rems = await remediations(cluster)
    assert sorted(r["target"] for r in rems) == [
        f"gpu_instance:{gpu_node.name}/{gpu_uuid(0)}/gi3", f"gpu_instance:{gpu_node.name}/{gpu_uuid(0)}/gi5"
    ]
    assert [(r["state"], r["state_reason"]) for r in rems if r["state"] != "succeeded"] == []
    assert gpu_node.evicted() == ["slice-a", "slice-b"]
