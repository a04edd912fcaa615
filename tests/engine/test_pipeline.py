"""The whole path: Alertmanager payload -> rule -> playbook -> Kubernetes over real HTTP -> exact revert."""

from __future__ import annotations

from typing import Any

from tests.engine.conftest import Cluster, MakeCluster
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels

TAINT_KEY = "remediator.io/gpu-unhealthy"


def gpu_node(fake: FakeKube, name: str = "gpu-1", **kw: Any) -> None:
    fake.add_node(name, labels={"nvidia.com/gpu.present": "true"}, **kw)
    deployment = fake.add_deployment("trainer", "ml")
    rs = fake.add_replicaset("trainer-abc", "ml", replicas=2, deployment=deployment)
    fake.add_pod("trainer-abc-1", "ml", node=name, gpus=4, owner=rs)
    fake.add_pod("trainer-abc-2", "ml", node=name, gpus=4, owner=rs)
    fake.add_pod("web-1", "apps", node=name, gpus=0)
    ds = fake.add_daemonset("dcgm-exporter", "monitoring")
    fake.add_pod("dcgm-exporter-x", "monitoring", node=name, gpus=0, owner=ds)


def taints(fake: FakeKube, node: str) -> list[dict[str, Any]]:
    return list((fake.node(node) or {}).get("spec", {}).get("taints") or [])


async def test_xid79_taints_cordons_drains_marks_for_reboot_and_resolve_reverts(
    make_cluster: MakeCluster,
) -> None:
    cluster: Cluster = await make_cluster()
    fake = cluster.fake
    gpu_node(fake)
    firing = am_alert(xid_labels("gpu-1", 79))
    await cluster.post(am_payload(firing))
    await cluster.settle()

    node = fake.node("gpu-1")
    assert node is not None and node["spec"].get("unschedulable") is True
    assert node["metadata"]["labels"]["remediator.io/state"] == "reboot-required"
    assert {"key": TAINT_KEY, "value": "xid-79", "effect": "NoSchedule"} in [
        {k: t[k] for k in ("key", "value", "effect")} for t in taints(fake, "gpu-1")
    ]
    evicted = {c.name for c in fake.requests("evict")}
    assert evicted == {"trainer-abc-1", "trainer-abc-2"}

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded" and rem["rule"] == "xid-reboot-node" and rem["playbook"] == "reboot-node"
    forward = [s for s in rem["steps"] if s["phase"] == "forward"]
    assert [(s["name"], s["status"]) for s in forward] == [
        ("taint", "succeeded"), ("cordon", "succeeded"), ("drain", "succeeded"), ("condition", "succeeded"),
        ("mark", "succeeded"), ("event", "succeeded"),
    ]
    owners = {p["name"]: [o["kind"] for o in p["owners"]] for p in rem["context"]["pods"]}
    assert owners["trainer-abc-1"] == ["ReplicaSet", "Deployment"]
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    kinds = [e["kind"] for e in audit]
    assert kinds.count("step.succeeded") == 6 and "state.running" in kinds and "state.succeeded" in kinds
    assert gpu_condition(fake)[:3] == (
        "False", "Xid79",
        "GPU GPU-8e6a1c2d-0000-4000-8000-000000000001 needs a node reboot; quarantined by gpu-remediator "
        "(GPUXidError, Xid 79: GPU has fallen off the bus)",
    )

    # After a reboot (a new boot ID) and a passed gate, resolving lifts exactly what the remediation added.
    fake.reboot_node("gpu-1")
    resolved = am_alert(xid_labels("gpu-1", 79), status="resolved")
    await cluster.post(am_payload(resolved))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "reverted"
    node = fake.node("gpu-1")
    assert node is not None and not node["spec"].get("unschedulable")
    assert not [t for t in taints(fake, "gpu-1") if t["key"] == TAINT_KEY]
    assert not [k for k in node["metadata"].get("labels", {}) if k.startswith("remediator.io/")]
    assert gpu_condition(fake)[:2] == ("True", "Recovered")

    # In the write history: the condition appeared and cleared through nodes/status only, merged by type
    # (Ready untouched), once each way.
    status_writes = [c for c in fake.writes("nodes") if c.subresource == "status" and c.ok]
    assert [c.body["status"]["conditions"][0]["status"] for c in status_writes] == ["False", "True"]
    assert all(set(c.body) == {"metadata", "status"} and c.params["fieldManager"] == "remediator"
               for c in status_writes)
    assert not [c for c in fake.writes("nodes") if c.subresource is None and "status" in (c.body or {})]
    history = [[(x["type"], x["status"]) for x in (c.object or {}).get("status", {}).get("conditions", [])]
               for c in fake.history("nodes")]
    assert [("Ready", "True"), ("GPUHealthy", "False")] in history
    assert history[-1] == [("Ready", "True"), ("GPUHealthy", "True")]


def gpu_condition(fake: FakeKube) -> tuple[str, str, str, str]:
    node = fake.node("gpu-1") or {}
    found = next(c for c in node["status"]["conditions"] if c["type"] == "GPUHealthy")
    return found["status"], found["reason"], found["message"], found["lastTransitionTime"]


async def test_a_finished_remediation_can_be_reverted_on_request(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()
    rem = await cluster.only_remediation()
    cluster.fake.reboot_node("gpu-1")
    assert (await cluster.api.post(f"/api/v1/remediations/{rem['id']}/revert")).status_code == 200
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "reverted"
    node = cluster.fake.node("gpu-1")
    assert node is not None and not node["spec"].get("unschedulable")
    again = await cluster.api.post(f"/api/v1/remediations/{rem['id']}/revert")
    assert again.status_code == 409


async def test_revert_restores_exactly_the_prior_state(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    fake = cluster.fake
    foreign = {"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}
    gpu_node(fake, unschedulable=True, taints=[foreign])
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 167))))
    await cluster.settle()
    rem = await cluster.only_remediation()
    fake.reboot_node("gpu-1")
    assert (await cluster.api.post(f"/api/v1/remediations/{rem['id']}/revert")).status_code == 200
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "reverted"
    node = fake.node("gpu-1")
    assert node is not None and node["spec"].get("unschedulable") is True  # someone else's cordon stays
    assert [{k: t[k] for k in ("key", "value", "effect")} for t in taints(fake, "gpu-1")] == [foreign]


async def test_second_alert_for_active_target_is_linked_not_started(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    # Same node and playbook, different GPU: linked to the active remediation before it finishes.
    await cluster.worker.process_alerts()
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79, gpu="5", uuid="GPU-other"))))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["linked_alerts"] == 1


async def test_unmatched_alert_is_stored_and_audited(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    await cluster.post(am_payload(am_alert({"alertname": "SomethingElse", "Hostname": "gpu-1"})))
    await cluster.settle()
    assert (await cluster.api.get("/api/v1/remediations")).json() == []
    audit = (await cluster.api.get("/api/v1/audit")).json()
    assert [e["kind"] for e in audit] == ["alert.unmatched"]
    assert not cluster.fake.writes()


async def test_application_xid_only_records_events(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 13, exported_pod="trainer-abc-1",
                                                      exported_namespace="ml"))))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["rule"] == "xid-application" and rem["state"] == "succeeded"
    assert {c.plural for c in cluster.fake.writes()} <= {"events"}
