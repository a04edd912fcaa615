"""The typed views read what a real apiserver sends and read absent or wrongly typed fields as empty."""

from __future__ import annotations

from remediator.kube.views import Body, Node, Pod, ResourceQuota, Scale, Workload

NODE = {
    "kind": "Node",
    "metadata": {
        "name": "gpu-1",
        "uid": "u-1",
        "resourceVersion": "42",
        "labels": {"nvidia.com/gpu.present": "true", "odd": 3},
        "annotations": {"remediator.io/remediation": "r-1"},
        "managedFields": [{"manager": "kubectl"}, "junk"],
    },
    "spec": {
        "unschedulable": True,
        "taints": [
            {"key": "remediator.io/gpu-unhealthy", "value": "xid79", "effect": "NoSchedule", "timeAdded": "t"},
            "not-a-taint",
            {"key": "other", "effect": "NoExecute"},
        ],
    },
    "status": {
        "conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        ],
        "addresses": [{"type": "Hostname", "address": "gpu-1"}, {"type": "InternalIP", "address": "10.0.0.7"}],
        "nodeInfo": {"bootID": "boot-a"},
        "allocatable": {"cpu": "64", "nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "7"},
        "capacity": {"nvidia.com/gpu": "8"},
    },
}


def test_node_fields() -> None:
    node = Node(NODE)
    assert node.name == "gpu-1" and node.uid == "u-1" and node.resource_version == "42"
    assert node.labels == {"nvidia.com/gpu.present": "true"}  # a non-string label value is left out
    assert node.annotations["remediator.io/remediation"] == "r-1"
    assert node.unschedulable is True
    assert node.ready is True
    assert node.internal_ip == "10.0.0.7"
    assert node.boot_id == "boot-a"
    assert dict(node.allocatable_gpus) == {"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "7"}
    assert dict(node.capacity_gpus) == {"nvidia.com/gpu": "8"}
    assert node.metadata.managed_fields == [{"manager": "kubectl"}]


def test_taints_parse_and_keep_their_raw_fields() -> None:
    taints = Node(NODE).taints
    assert [(t.key, t.value, t.effect) for t in taints] == [
        ("remediator.io/gpu-unhealthy", "xid79", "NoSchedule"),
        ("other", None, "NoExecute"),
    ]
    assert taints[0].time_added == "t"
    assert taints[0].raw["timeAdded"] == "t"  # a patch built from raw taints keeps what the view does not name


def test_conditions() -> None:
    node = Node(NODE)
    ready = node.condition("Ready")
    assert ready is not None and ready.is_true and ready.reason == "KubeletReady"
    pressure = node.condition("MemoryPressure")
    assert pressure is not None and not pressure.is_true
    assert node.condition("GPUHealthy") is None


def test_not_ready_when_the_condition_is_false_unknown_or_missing() -> None:
    assert not Node({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}).ready
    assert not Node({"status": {"conditions": [{"type": "Ready", "status": True}]}}).ready  # a bool, not "True"
    assert not Node({}).ready


def test_absent_fields_read_as_empty() -> None:
    for node in (Node({}), Node({"metadata": None, "spec": None, "status": None})):
        assert node.name is None and node.uid is None and node.resource_version is None
        assert node.labels == {} and node.annotations == {}
        assert node.metadata.owner_references == () and node.metadata.controller_reference is None
        assert node.unschedulable is False and node.taints == () and node.conditions == ()
        assert node.internal_ip is None and node.boot_id is None and dict(node.allocatable_gpus) == {}


def test_a_hostile_object_does_not_raise() -> None:
    hostile = {
        "metadata": ["not", "a", "map"],
        "spec": "nope",
        "status": {"conditions": "x", "addresses": [1, None, {"type": 5, "address": 6}], "nodeInfo": 7},
    }
    node = Node(hostile)
    assert node.name is None and node.labels == {} and node.taints == () and not node.ready
    assert node.internal_ip is None and node.boot_id is None
    assert Node("not an object").raw == {}
    pod = Pod({"metadata": {"ownerReferences": [{"kind": 3, "name": None, "controller": "yes"}]},
               "spec": {"containers": [{"resources": {"requests": "8"}}], "terminationGracePeriodSeconds": "30"}})
    ref = pod.owner_references[0]
    assert (ref.kind, ref.name, ref.uid, ref.controller) == ("", "", None, False)
    assert pod.pod_spec.containers[0].requests == {}
    assert pod.pod_spec.termination_grace_period_seconds is None


def test_pod_fields_and_gpu_requests() -> None:
    pod = Pod({
        "metadata": {
            "name": "train-0", "namespace": "ml", "uid": "p-1", "deletionTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [
                {"kind": "Node", "name": "gpu-1", "uid": "n"},
                {"kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": True},
            ],
        },
        "spec": {
            "nodeName": "gpu-1",
            "nodeSelector": {"nvidia.com/gpu.deploy.driver": "true"},
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {"name": "a", "resources": {"requests": {"nvidia.com/gpu": "2", "cpu": "1"}}},
                {"name": "b", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}},
            ],
            "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    })
    assert (pod.name, pod.namespace, pod.uid, pod.node_name, pod.phase) == ("train-0", "ml", "p-1", "gpu-1", "Running")
    assert pod.deletion_timestamp == "2026-01-01T00:00:00Z" and pod.ready
    controller = pod.metadata.controller_reference
    assert controller is not None and (controller.kind, controller.uid) == ("ReplicaSet", "rs-1")
    assert pod.pod_spec.node_selector == {"nvidia.com/gpu.deploy.driver": "true"}
    assert pod.pod_spec.termination_grace_period_seconds == 30
    a, b = pod.pod_spec.containers
    assert a.gpu_amounts() == [{"nvidia.com/gpu": "2"}, {}]
    assert b.gpu_amounts() == [{}, {"nvidia.com/mig-1g.10gb": 1}]
    assert pod.pod_spec.init_containers[0].gpu_amounts() == [{}, {"nvidia.com/gpu": "4"}]


def test_the_first_owner_reference_stands_in_when_none_is_the_controller() -> None:
    ref = Body({"metadata": {"ownerReferences": [{"kind": "Job", "name": "j"}]}}).metadata.controller_reference
    assert ref is not None and ref.name == "j" and not ref.controller


def test_workload_scale_and_quota() -> None:
    job = Workload({"spec": {"suspend": True, "parallelism": 2, "template": {"spec": {"containers": [{}]}}},
                    "status": {"active": 3}})
    assert job.suspend is True and job.parallelism == 2 and job.active == 3
    assert len(job.template_spec.containers) == 1
    assert Workload({}).template_spec.containers == () and Workload({}).suspend is None
    assert Scale({"spec": {"replicas": 4}}).replicas == 4 and Scale({}).replicas is None
    quota = ResourceQuota({"spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
                           "status": {"used": {"requests.nvidia.com/gpu": "2"}}})
    assert dict(quota.hard) == {"requests.nvidia.com/gpu": "8"} and quota.used["requests.nvidia.com/gpu"] == "2"
    assert dict(ResourceQuota({"spec": {"hard": []}}).hard) == {}
