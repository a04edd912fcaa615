"""Scoped, timed pauses and the live opt-out, through the real HTTP API against the strict fake API server: a
pause holds only its scope (nodes by name or label selector, playbooks, or all), says who, why and until when,
ends by itself at its end or when resumed, survives a restart, and shows in GET /api/v1/pauses and /healthz; the
opt-out label is read from the node before each step."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from remediator.actions.base import ActionContext, ActionResult
from remediator.actions.drain import Drain
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.helpers import am_alert, am_payload, xid_labels

FAST = {"held_recheck_interval": 0.1}


async def rem_on(cluster: Cluster, node: str) -> dict[str, Any]:
    (rem,) = (await cluster.api.get(f"/api/v1/remediations?node={node}")).json()
    return dict((await cluster.api.get(f"/api/v1/remediations/{rem['id']}")).json())


async def alert(cluster: Cluster, node: str) -> None:
    await cluster.post(am_payload(am_alert(xid_labels(node, 79))))


async def test_a_pause_needs_a_reason_and_a_valid_scope(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    for body in ({}, {"reason": "  "}, {"reason": "x", "selector": "pool in (a,b)"},
                 {"reason": "x", "for": "2h", "until": "2030-01-01T00:00:00Z"}, {"reason": "x", "for": "soon"},
                 {"reason": "x", "until": "2030-01-01T00:00:00"}, {"reason": "x", "until": "2001-01-01T00:00:00Z"},
                 {"reason": "x", "nodes": ["a b"]}, {"reason": "x", "scope": "all"}):
        r = await cluster.api.post("/api/v1/pauses", json=body)
        assert r.status_code == 422, (body, r.text)
    assert (await cluster.api.get("/api/v1/pauses")).json() == []


async def test_a_node_pause_holds_only_its_nodes_names_who_and_why_and_resume_lets_them_go(
    make_cluster: MakeCluster,
) -> None:
    cluster: Cluster = await make_cluster(**FAST)
    gpu_node(cluster.fake, "gpu-1")
    cluster.fake.add_node("gpu-2", labels={"nvidia.com/gpu.present": "true"})
    await cluster.worker.refresh_inventory()
    r = await cluster.api.post("/api/v1/pauses", json={"reason": "firmware upgrade", "by": "alice",
                                                        "nodes": ["gpu-1"], "for": "2h"})
    assert r.status_code == 201, r.text
    pause = r.json()
    assert pause["created_by"] == "api:alice" and pause["scope"]["nodes"] == ["gpu-1"] and pause["until"]
    await alert(cluster, "gpu-1")
    await alert(cluster, "gpu-2")
    await cluster.settle()
    held = await rem_on(cluster, "gpu-1")
    assert held["state"] == "held"
    assert held["state_reason"].startswith(f"paused by api:alice: firmware upgrade (pause {pause['id']}, nodes gpu-1 "
                                           "until ")
    assert (await rem_on(cluster, "gpu-2"))["state"] == "succeeded"
    health = (await cluster.api.get("/healthz")).json()
    assert [p["id"] for p in health["pauses"]] == [pause["id"]] and health["pauses"][0]["reason"] == "firmware upgrade"
    assert [p["id"] for p in (await cluster.api.get("/api/v1/guardrails")).json()["pauses"]] == [pause["id"]]

    # Survives a restart: a new runtime on the same database still holds gpu-1.
    again: Cluster = await make_cluster(**FAST)
    assert [p["id"] for p in (await again.api.get("/api/v1/pauses")).json()] == [pause["id"]]

    r = await cluster.api.request("DELETE", f"/api/v1/pauses/{pause['id']}", json={"by": "bob", "reason": "done"})
    assert r.status_code == 200 and r.json()["ended_by"] == "api:bob" and not r.json()["active"]
    await cluster.settle()
    assert (await rem_on(cluster, "gpu-1"))["state"] == "succeeded"
    events = (await cluster.api.get("/api/v1/audit")).json()
    kinds = {e["kind"]: e for e in events if e["kind"].startswith("pause.")}
    assert kinds["pause.created"]["actor"] == "api:alice" and kinds["pause.ended"]["actor"] == "api:bob"
    assert (await cluster.api.get("/api/v1/pauses")).json() == []
    assert len((await cluster.api.get("/api/v1/pauses?all=true")).json()) == 1


async def test_a_selector_pause_ends_by_itself_and_playbook_pauses_coexist(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster(**FAST)
    gpu_node(cluster.fake, "gpu-1")
    cluster.fake.write("nodes", None, "gpu-1", {"metadata": {"labels": {"pool": "a"}}})
    until = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
    assert (await cluster.api.post("/api/v1/pauses", json={"reason": "pool a drill", "selector": "pool=a",
                                                            "until": until})).status_code == 201
    other = await cluster.api.post("/api/v1/pauses", json={"reason": "no resets", "playbooks": ["reset-gpu"]})
    assert other.status_code == 201
    assert len((await cluster.api.get("/api/v1/pauses")).json()) == 2
    await alert(cluster, "gpu-1")
    await cluster.settle()
    assert "pool a drill" in (await rem_on(cluster, "gpu-1"))["state_reason"]
    await asyncio.sleep(1.6)
    await cluster.settle()
    assert (await rem_on(cluster, "gpu-1"))["state"] == "succeeded"  # reboot-node: the reset-gpu pause is not its
    assert [p["reason"] for p in (await cluster.api.get("/api/v1/pauses")).json()] == ["no resets"]


class GatedDrain(Drain):
    """A drain that waits until the test lets it finish (to label the node while a step runs)."""

    def __init__(self) -> None:
        super().__init__(poll_interval=0.05, backoff_initial=0.05, backoff_max=0.2)
        self.reached = asyncio.Event()
        self.open = asyncio.Event()

    async def run(self, ctx: ActionContext, params: Any) -> ActionResult:
        self.reached.set()
        await self.open.wait()
        return ActionResult(changed=False, message="drained (test)", output={})


async def test_the_opt_out_label_is_read_before_each_step(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster(**FAST)
    drain = GatedDrain()
    assert isinstance(cluster.rt.actions, dict)
    cluster.rt.actions["drain"] = drain
    gpu_node(cluster.fake, "gpu-1")
    await alert(cluster, "gpu-1")
    driving = asyncio.create_task(cluster.settle())
    async with asyncio.timeout(20):
        await drain.reached.wait()
    cluster.fake.write("nodes", None, "gpu-1", {"metadata": {"labels": {"remediator.io/exclude": "true"}}})
    drain.open.set()
    await driving
    rem = await rem_on(cluster, "gpu-1")
    assert rem["state"] == "held" and "remediator.io/exclude=true" in rem["state_reason"]
    ran = [s["name"] for s in rem["steps"] if s["phase"] == "forward"]
    assert ran == ["taint", "cordon", "drain"]  # held from its next step on
    cluster.fake.write("nodes", None, "gpu-1", {"metadata": {"labels": {"remediator.io/exclude": None}}})
    await asyncio.sleep(0.2)
    await cluster.settle()
    rem = await rem_on(cluster, "gpu-1")
    assert rem["state"] == "succeeded" and "condition" in [s["name"] for s in rem["steps"]]
