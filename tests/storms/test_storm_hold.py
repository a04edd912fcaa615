"""The storm guardrail through the real HTTP API against the strict fake API server: when the faulting nodes of the
window share a driver far more often than the fleet does, remediations on nodes with that driver wait for one group
decision while a node outside it goes on; one approval releases them all, one rejection cancels them all; the
storm is listed, described, audited, and turned off by a setting."""

from __future__ import annotations

from typing import Any

from tests.engine.conftest import Cluster, MakeCluster
from tests.helpers import am_alert, am_payload, xid_labels

DRIVER = "nvidia.com/cuda.driver-version.full"
# 30 GPU nodes, 6 on the new driver; a small fleet needs a looser threshold than the default 1e-6.
STORM = {"held_recheck_interval": 0.1, "storm_p_value": 0.01, "max_quarantined_nodes": "20"}


def fleet(cluster: Cluster) -> None:
    for i in range(30):
        driver = "580.95.05" if i < 6 else "570.86.15"
        cluster.fake.add_node(f"n{i:02}", labels={"nvidia.com/gpu.present": "true", DRIVER: driver,
                                                  "zone": f"z{i % 3}"})


async def fault(cluster: Cluster, *nodes: str) -> None:
    await cluster.post(am_payload(*(am_alert(xid_labels(n, 79, uuid=f"GPU-{n}")) for n in nodes)))
    await cluster.settle()


async def by_node(cluster: Cluster) -> dict[str, dict[str, Any]]:
    rems = (await cluster.api.get("/api/v1/remediations")).json()
    return {r["node"]: r for r in rems}


async def storm_cluster(make_cluster: MakeCluster, **overrides: Any) -> Cluster:
    cluster: Cluster = await make_cluster(**{**STORM, **overrides})
    fleet(cluster)
    await cluster.worker.refresh_inventory()
    return cluster


async def test_nodes_sharing_the_cause_wait_and_one_approval_releases_them_all(make_cluster: MakeCluster) -> None:
    cluster = await storm_cluster(make_cluster)
    await fault(cluster, "n00", "n01", "n02", "n03", "n04", "n10")
    rems = await by_node(cluster)
    for node in ("n00", "n01", "n02", "n03", "n04"):
        assert rems[node]["state"] == "held", rems[node]
        assert rems[node]["state_reason"].startswith("storm "), rems[node]
    assert rems["n10"]["state"] != "held", rems["n10"]  # outside the cause: goes on
    (storm,) = (await cluster.api.get("/api/v1/storms")).json()
    assert storm["state"] == "open" and storm["cause"]["value"] == "580.95.05"
    assert storm["cause"]["text"].startswith(f"5 of 6 faulting nodes carry label {DRIVER}=580.95.05; 20% of the fleet")
    assert storm["id"] in rems["n00"]["state_reason"]
    detail = (await cluster.api.get(f"/api/v1/storms/{storm['id']}")).json()
    assert detail["analysis"]["candidates"][0]["value"] == "580.95.05"
    assert [e["event"] for e in detail["timeline"]] == ["opened"]
    # A later fault on another node with the driver joins the storm and waits too.
    await fault(cluster, "n05")
    assert (await by_node(cluster))["n05"]["state"] == "held"
    grown = (await cluster.api.get(f"/api/v1/storms/{storm['id']}")).json()
    assert "n05" in grown["nodes"] and grown["timeline"][-1]["event"] == "grown"

    answer = await cluster.api.post(f"/api/v1/storms/{storm['id']}/approve", json={"by": "oncall", "reason": "ok"})
    assert answer.status_code == 200, answer.text
    assert sorted(answer.json()["released"]) == sorted(rems[n]["id"] for n in ("n00", "n01", "n02", "n03", "n04")) \
        or len(answer.json()["released"]) == 6
    await cluster.settle()
    after = await by_node(cluster)
    assert all(after[n]["state"] != "held" for n in ("n00", "n01", "n02", "n03", "n04", "n05")), after
    assert (await cluster.api.post(f"/api/v1/storms/{storm['id']}/reject", json={"reason": "late"})).status_code == 409
    audit = (await cluster.api.get("/api/v1/audit")).json()
    kinds = [row.get("kind") or row.get("event") for row in (audit if isinstance(audit, list) else audit["events"])]
    assert "storm.opened" in kinds and "storm.grown" in kinds and "storm.approved" in kinds


async def test_one_rejection_cancels_every_remediation_the_storm_holds(make_cluster: MakeCluster) -> None:
    cluster = await storm_cluster(make_cluster)
    await fault(cluster, "n00", "n01", "n02", "n03", "n04", "n10")
    (storm,) = (await cluster.api.get("/api/v1/storms")).json()
    assert (await cluster.api.post(f"/api/v1/storms/{storm['id']}/reject", json={})).status_code == 422
    answer = await cluster.api.post(f"/api/v1/storms/{storm['id']}/reject",
                                    json={"by": "oncall", "reason": "driver rollout, rolling back"})
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["cancelled"]) == 5
    rems = await by_node(cluster)
    assert {rems[n]["state"] for n in ("n00", "n01", "n02", "n03", "n04")} == {"cancelled"}
    assert rems["n10"]["state"] != "cancelled"
    assert (await cluster.api.get("/api/v1/storms/nope")).status_code == 404


async def test_the_setting_turns_the_hold_off(make_cluster: MakeCluster) -> None:
    cluster = await storm_cluster(make_cluster, storm_hold=False)
    await fault(cluster, "n00", "n01", "n02", "n03", "n04")
    assert all(r["state"] != "held" for r in (await by_node(cluster)).values())
    assert (await cluster.api.get("/api/v1/storms")).json() == []
