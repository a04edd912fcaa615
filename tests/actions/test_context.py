"""gather_context: the alert's pod plus the node's GPU pods, each with its owner chain, never raising."""

from __future__ import annotations

import asyncio
from typing import Any

from remediator.actions.base import Target
from remediator.actions.context import alert_pod, gather, gather_context
from remediator.adapters.kube import KubeAdapter
from remediator.settings import Settings
from tests.actions.conftest import NODE
from tests.fakekube import Call, FakeKube

TARGET = Target(kind="gpu", node=NODE, gpu_uuid="GPU-1")


def by_name(context: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in context["pods"]}


async def test_owner_chains_follow_controllers(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, node: dict, settings: Settings
) -> None:
    fake_kube.add_namespace("ml")
    deploy = fake_kube.add_deployment("trainer", "ml")
    rs = fake_kube.add_replicaset("trainer-5d8f", "ml", deployment=deploy)
    cron = fake_kube.add_cronjob("nightly", "ml")
    job = fake_kube.add_job("nightly-123", "ml", cronjob=cron)
    sts = fake_kube.add_statefulset("db", "ml")
    fake_kube.add_pod("trainer-5d8f-x", "ml", node=NODE, gpus=1, owner=rs)
    fake_kube.add_pod("nightly-123-y", "ml", node=NODE, gpus=2, owner=job)
    fake_kube.add_pod("db-0", "ml", node=NODE, mig={"mig-1g.18gb": 1}, owner=sts)
    fake_kube.add_pod("web", "ml", node=NODE)

    context = await gather_context(kube_adapter, TARGET, {}, settings)
    pods = by_name(context)

    assert set(pods) == {"trainer-5d8f-x", "nightly-123-y", "db-0"}
    assert pods["trainer-5d8f-x"]["owners"] == [
        {"kind": "ReplicaSet", "name": "trainer-5d8f"},
        {"kind": "Deployment", "name": "trainer"},
    ]
    assert pods["nightly-123-y"]["owners"] == [
        {"kind": "Job", "name": "nightly-123"},
        {"kind": "CronJob", "name": "nightly"},
    ]
    assert pods["db-0"]["owners"] == [{"kind": "StatefulSet", "name": "db"}]
    assert pods["nightly-123-y"]["gpu_request"] == 2
    assert pods["db-0"]["gpu_request"] == 1
    assert context["pod_source"] == "alert+node"


async def test_missing_owner_is_recorded_not_raised(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, node: dict, settings: Settings
) -> None:
    rs = fake_kube.add_replicaset("gone-rs")
    fake_kube.add_pod("orphan", node=NODE, gpus=1, owner=rs)
    fake_kube.remove("replicasets", "default", "gone-rs")
    context = await gather_context(kube_adapter, TARGET, {}, settings)
    assert by_name(context)["orphan"]["owners"] == [
        {"kind": "ReplicaSet", "name": "gone-rs", "missing": True}
    ]


async def test_unknown_owner_kinds_end_the_chain(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, node: dict, settings: Settings
) -> None:
    pod = fake_kube.add_pod("worker", node=NODE, gpus=1)
    fake_kube.write(
        "pods",
        "default",
        "worker",
        {
            "metadata": {
                "ownerReferences": [
                    {
                        "apiVersion": "kubeflow.org/v1",
                        "kind": "MPIJob",
                        "name": "big",
                        "uid": "u1",
                        "controller": True,
                    }
                ]
            }
        },
    )
    context = await gather_context(kube_adapter, TARGET, {}, settings)
    owners = by_name(context)["worker"]["owners"]
    assert owners[0]["kind"] == "MPIJob"
    assert owners[0]["name"] == "big"
    assert pod["metadata"]["name"] == "worker"


async def test_alert_pod_is_included_and_flagged(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, node: dict, settings: Settings
) -> None:
    fake_kube.add_namespace("ml")
    fake_kube.add_pod("from-alert", "ml", node=NODE, gpus=1)
    fake_kube.add_pod("neighbour", "ml", node=NODE, gpus=1)
    labels = {
        "pod": "dcgm-exporter-abc",
        "namespace": "gpu-operator",
        "exported_pod": "from-alert",
        "exported_namespace": "ml",
    }
    context = await gather_context(kube_adapter, TARGET, labels, settings)
    pods = by_name(context)
    assert pods["from-alert"]["from_alert"] is True
    assert pods["neighbour"]["from_alert"] is False
    assert "dcgm-exporter-abc" not in pods
    assert len(context["pods"]) == 2


async def test_alert_pod_that_no_longer_exists_is_marked_missing(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, node: dict, settings: Settings
) -> None:
    context = await gather_context(kube_adapter, TARGET, {"pod": "gone", "namespace": "default"}, settings)
    assert by_name(context)["gone"]["missing"] is True


async def test_node_summary(fake_kube: FakeKube, kube_adapter: KubeAdapter, settings: Settings) -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    fake_kube.add_node(
        NODE,
        ip="127.0.0.9",
        labels={"nvidia.com/gpu.product": "H200", "team": "x"},
        taints=[taint],
        unschedulable=True,
    )
    boot_id = (fake_kube.node(NODE) or {})["status"]["nodeInfo"]["bootID"]
    context = await gather_context(kube_adapter, TARGET, {}, settings)
    assert context["node"] == {
        "name": NODE,
        "unschedulable": True,
        "taints": [taint],
        "labels": {"nvidia.com/gpu.product": "H200", "kubernetes.io/hostname": NODE},
        "internal_ip": "127.0.0.9",
        "boot_id": boot_id,  # what await_reboot compares with before a return to service
        "ready": True,
    }


async def test_without_a_cluster_only_the_labels_speak(settings: Settings) -> None:
    context = await gather_context(None, TARGET, {"pod": "p", "namespace": "ml"}, settings)
    assert context["pod_source"] == "alert"
    assert [(p["namespace"], p["name"], p["from_alert"]) for p in context["pods"]] == [("ml", "p", True)]
    empty = await gather_context(None, TARGET, {}, settings)
    assert (empty["pod_source"], empty["pods"]) == ("none", [])


def test_the_exporters_own_pod_is_not_the_alerts_pod() -> None:
    exporter = {"pod": "nvidia-dcgm-exporter-7x2kq", "namespace": "gpu-operator"}
    assert alert_pod(exporter, TARGET) is None
    assert alert_pod({**exporter, "exported_pod": "trainer-0", "exported_namespace": "ml"}, TARGET) == (
        "ml", "trainer-0")
    assert alert_pod({"pod": "trainer-0", "namespace": "ml"}, TARGET) == ("ml", "trainer-0")
    assert alert_pod({"pod": "mon-1", "namespace": "mon"}, TARGET, ["mon-"]) is None


async def test_owners_of_different_pods_are_read_together_and_each_once(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, node: dict, settings: Settings
) -> None:
    fake_kube.add_namespace("ml")
    deploy = fake_kube.add_deployment("trainer", "ml")
    first = fake_kube.add_replicaset("trainer-1", "ml", deployment=deploy)
    second = fake_kube.add_replicaset("trainer-2", "ml", deployment=deploy)
    fake_kube.add_pod("a", "ml", node=NODE, gpus=1, owner=first)
    fake_kube.add_pod("b", "ml", node=NODE, gpus=1, owner=first)
    fake_kube.add_pod("c", "ml", node=NODE, gpus=1, owner=second)
    both_in = asyncio.Event()
    in_flight: list[str | None] = []

    async def hold(call: Call) -> None:  # each ReplicaSet read waits until the other one has arrived too
        in_flight.append(call.name)
        if len(in_flight) == 2:
            both_in.set()
        await asyncio.wait_for(both_in.wait(), timeout=5)

    fake_kube.before("get", "replicasets", hold, times=2)
    context = await gather_context(kube_adapter, TARGET, {}, settings)

    assert sorted(in_flight) == ["trainer-1", "trainer-2"]  # the second read started before the first ended
    assert [c.name for c in fake_kube.requests("get", "replicasets")] == in_flight  # each read once
    assert len(fake_kube.requests("get", "deployments")) == 1
    assert [p["name"] for p in context["pods"]] == ["a", "b", "c"]
    for pod in context["pods"]:
        assert pod["owners"][1] == {"kind": "Deployment", "name": "trainer"}


async def test_an_unreadable_shared_owner_is_explained_on_the_first_pod_in_order(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, node: dict, settings: Settings
) -> None:
    """Read together, the chains still come out as if read one by one: the first pod naming the owner
    carries the error, later ones say it is missing."""
    fake_kube.add_namespace("ml")
    rs = fake_kube.add_replicaset("trainer-1", "ml")
    fake_kube.add_pod("a", "ml", node=NODE, gpus=1, owner=rs)
    fake_kube.add_pod("b", "ml", node=NODE, gpus=1, owner=rs)
    fake_kube.fail("get", "replicasets", status=403, times=1)
    context = await gather_context(kube_adapter, TARGET, {}, settings)
    first, second = context["pods"]
    assert (first["name"], second["name"]) == ("a", "b")
    assert "error" in first["owners"][0] and first["owners"][0]["missing"] is True
    assert second["owners"] == [{"kind": "ReplicaSet", "name": "trainer-1", "missing": True}]
    assert len(fake_kube.requests("get", "replicasets")) == 1


async def test_owners_read_by_one_context_serve_the_next_until_recreated(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, node: dict, settings: Settings
) -> None:
    """A storm gathers the context of many nodes running pods of the same workloads: each owner is read once
    for all of them, and read again when a pod names an owner of the same name with another uid."""
    fake_kube.add_namespace("ml")
    deploy = fake_kube.add_deployment("trainer", "ml")
    rs = fake_kube.add_replicaset("trainer-1", "ml", deployment=deploy)
    fake_kube.add_pod("a", "ml", node=NODE, gpus=1, owner=rs)
    first = await gather_context(kube_adapter, TARGET, {}, settings)
    second = await gather_context(kube_adapter, TARGET, {}, settings)
    assert first["pods"] == second["pods"]
    assert second["pods"][0]["owners"] == [{"kind": "ReplicaSet", "name": "trainer-1"},
                                           {"kind": "Deployment", "name": "trainer"}]
    assert len(fake_kube.requests("get", "replicasets")) == 1
    assert len(fake_kube.requests("get", "deployments")) == 1

    fake_kube.remove("pods", "ml", "a")
    fake_kube.remove("replicasets", "ml", "trainer-1")
    recreated = fake_kube.add_replicaset("trainer-1", "ml", deployment=deploy)
    assert recreated["metadata"]["uid"] != rs["metadata"]["uid"]
    fake_kube.add_pod("a", "ml", node=NODE, gpus=1, owner=recreated)
    third = await gather_context(kube_adapter, TARGET, {}, settings)
    assert third["pods"][0]["owners"][0] == {"kind": "ReplicaSet", "name": "trainer-1"}
    assert len(fake_kube.requests("get", "replicasets")) == 2  # the new uid is read, not taken from memory


async def test_gather_keeps_the_node_object_it_summarised_and_none_for_a_missing_node(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, node: dict, settings: Settings
) -> None:
    read = await gather(kube_adapter, TARGET, {}, settings)
    assert read.node is not None and read.node["metadata"]["name"] == NODE
    assert read.node["metadata"]["resourceVersion"]  # what a taint guards its patch with
    assert read.context == await gather_context(kube_adapter, TARGET, {}, settings)

    gone = await gather(kube_adapter, Target(kind="node", node="no-such-node"), {}, settings)
    assert gone.node is None and gone.context["node"] == {"name": "no-such-node", "missing": True}
    assert (await gather(None, TARGET, {}, settings)).node is None  # plan-only: no cluster to read
