"""The shipped idle playbook through the engine over the fake apiserver: cancel on resolve during the wait,
scale-down and quota reclaim after an API approval, and exact restores on resolve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.engine.conftest import Cluster, MakeCluster
from tests.helpers import am_alert, am_payload
from tests.idle.conftest import idle_labels
from tests.idle.scene import NS, QUOTA, build_scene, definitions, eventually, quota_hard, replicas

KEY = "remediator.io/idle-gpu"


async def state_of(cluster: Cluster) -> dict[str, Any]:
    return await cluster.only_remediation()


def step_status(rem: dict[str, Any], name: str) -> str | None:
    return next((s["status"] for s in rem["steps"] if s["name"] == name and s["phase"] == "forward"), None)


async def reach(cluster: Cluster, *states: str) -> dict[str, Any]:
    async def check() -> bool:
        rems = (await cluster.api.get("/api/v1/remediations")).json()
        return bool(rems) and rems[0]["state"] in states

    await eventually(check, cluster.settle)
    return await state_of(cluster)


async def test_resolving_during_the_wait_cancels_and_removes_the_marks(
    tmp_path: Path, make_cluster: MakeCluster
) -> None:
    rules, playbooks = definitions(tmp_path, wait="1h", poll="50ms")
    cluster: Cluster = await make_cluster(rules_dir=rules, playbooks_dir=playbooks)
    pods = build_scene(cluster.fake)
    labels = idle_labels(pods[0], NS)
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()

    rem = await state_of(cluster)
    assert rem["state"] == "running" and step_status(rem, "wait") == "running"
    pod = cluster.fake.pod(NS, pods[0])
    assert pod is not None and KEY in pod["metadata"]["annotations"]

    await cluster.post(am_payload(am_alert(labels, status="resolved")))
    rem = await reach(cluster, "reverted", "cancelled")

    assert step_status(rem, "wait") == "cancelled"
    assert step_status(rem, "scale") is None
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    assert "state.cancelled" in [e["kind"] for e in audit]
    assert rem["state"] == "reverted"
    pod = cluster.fake.pod(NS, pods[0])
    assert pod is not None and KEY not in (pod["metadata"].get("annotations") or {})
    assert replicas(cluster.fake) == 2 and quota_hard(cluster.fake) == QUOTA
    assert not cluster.fake.requests("patch", "deployments") and not cluster.fake.writes("resourcequotas")


async def test_approved_reclaim_scales_down_lowers_quota_and_resolve_restores_both(
    tmp_path: Path, make_cluster: MakeCluster
) -> None:
    rules, playbooks = definitions(tmp_path, wait="10ms", poll="10ms", on_resolved="revert")
    cluster: Cluster = await make_cluster(rules_dir=rules, playbooks_dir=playbooks)
    pods = build_scene(cluster.fake)
    labels = idle_labels(pods[1], NS)
    await cluster.post(am_payload(am_alert(labels)))
    rem = await reach(cluster, "awaiting_approval")
    assert step_status(rem, "wait") == "succeeded" and replicas(cluster.fake) == 2

    approved = await cluster.api.post(f"/api/v1/remediations/{rem['id']}/approve", json={"comment": "idle"})
    assert approved.status_code == 200, approved.text
    rem = await reach(cluster, "succeeded")

    assert replicas(cluster.fake) == 0
    assert quota_hard(cluster.fake) == {**QUOTA, "requests.nvidia.com/gpu": "4", "limits.nvidia.com/gpu": "4"}
    scale = next(s for s in rem["steps"] if s["name"] == "scale")
    assert scale["output"]["gpus_freed"] == 4

    await cluster.post(am_payload(am_alert(labels, status="resolved")))
    rem = await reach(cluster, "reverted")
    assert replicas(cluster.fake) == 2
    assert quota_hard(cluster.fake) == QUOTA

    report = (await cluster.api.get("/api/v1/reports/idle")).json()
    [line] = report["namespaces"]
    assert (line["namespace"], line["gpus_reclaimed"], line["gpus_reclaimed_now"]) == (NS, 4, 0)
    assert line["quota_lowered_now"] == {}
