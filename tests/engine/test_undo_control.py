"""Cancel and pause reach an undo: cancelling stops it before its next step; pausing holds it until resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.definitions import NOTE_PLAYBOOK, NOTE_RULE, definitions, note_alert
from tests.fakekube.server import Call
from tests.helpers import am_payload

NOTE_KEY = "example.com/note"
TAINT_KEY = "example.com/noted"


async def remediated(cluster: Cluster) -> str:
    """A finished note-node remediation on gpu-1 (tainted, cordoned, annotated); returns its id."""
    cluster.fake.add_node("gpu-1")
    await cluster.post(am_payload(note_alert("gpu-1", "hi")))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    return str(rem["id"])


def block_next_node_patch(cluster: Cluster) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the next PATCH of a node in the fake API server: (reached, release)."""
    reached, release = asyncio.Event(), asyncio.Event()

    async def hold(call: Call) -> None:
        reached.set()
        await release.wait()

    cluster.fake.before("patch", "nodes", hold)
    return reached, release


def node_state(cluster: Cluster) -> dict[str, Any]:
    node = cluster.fake.node("gpu-1")
    assert node is not None
    return {
        "cordoned": bool(node["spec"].get("unschedulable")),
        "tainted": any(t["key"] == TAINT_KEY for t in node["spec"].get("taints") or []),
        "annotated": NOTE_KEY in (node["metadata"].get("annotations") or {}),
    }


async def revert_rows(cluster: Cluster, rem_id: str) -> list[tuple[str, str]]:
    detail = (await cluster.api.get(f"/api/v1/remediations/{rem_id}")).json()
    return [(s["name"], s["status"]) for s in detail["steps"] if s["phase"] == "revert"]


async def test_cancel_during_an_undo_stops_it_before_its_next_step(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster: Cluster = await make_cluster(**definitions(tmp_path, NOTE_RULE, NOTE_PLAYBOOK))
    rem_id = await remediated(cluster)
    reached, release = block_next_node_patch(cluster)
    assert (await cluster.api.post(f"/api/v1/remediations/{rem_id}/revert")).status_code == 200
    undo = asyncio.create_task(cluster.settle())
    async with asyncio.timeout(20):
        await reached.wait()  # the first undo step (unannotate) is writing

    r = await cluster.api.post(f"/api/v1/remediations/{rem_id}/cancel", json={"reason": "test"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "cancelled"
    release.set()
    await undo

    detail = (await cluster.api.get(f"/api/v1/remediations/{rem_id}")).json()
    assert detail["state"] == "cancelled" and detail["state_reason"] == "cancelled by api: test"
    # The write in flight when the cancel came finished; nothing after it ran: the node stays as it is.
    assert await revert_rows(cluster, rem_id) == [("revert:note", "running")]
    assert node_state(cluster) == {"cordoned": True, "tainted": True, "annotated": False}
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem_id}")).json()
    cancelled = [e for e in audit if e["kind"] == "state.cancelled"]
    assert len(cancelled) == 1 and cancelled[0]["data"]["from"] == "reverting"
    assert cancelled[0]["actor"] == "api"
    assert not [e for e in audit if e["kind"] == "step.started" and e["data"]["step"] != "revert:note"
                and e["data"]["phase"] == "revert"]

    # The undo can be asked for again, and then finishes.
    assert (await cluster.api.post(f"/api/v1/remediations/{rem_id}/revert")).status_code == 200
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "reverted"
    assert node_state(cluster) == {"cordoned": False, "tainted": False, "annotated": False}


async def test_pause_stops_an_undo_before_its_next_mutating_step(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster: Cluster = await make_cluster(**definitions(tmp_path, NOTE_RULE, NOTE_PLAYBOOK))
    rem_id = await remediated(cluster)
    reached, release = block_next_node_patch(cluster)
    assert (await cluster.api.post(f"/api/v1/remediations/{rem_id}/revert")).status_code == 200
    undo = asyncio.create_task(cluster.settle())
    async with asyncio.timeout(20):
        await reached.wait()

    assert (await cluster.api.post("/api/v1/pause", json={"reason": "test"})).json() == {"paused": True}
    release.set()
    await undo  # the step in flight finishes, then the undo waits

    detail = (await cluster.api.get(f"/api/v1/remediations/{rem_id}")).json()
    assert detail["state"] == "reverting" and "paused" in detail["state_reason"]
    assert await revert_rows(cluster, rem_id) == [("revert:note", "succeeded")]
    assert node_state(cluster) == {"cordoned": True, "tainted": True, "annotated": False}
    await cluster.settle()  # polling while paused changes nothing
    assert node_state(cluster)["cordoned"] is True
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem_id}")).json()
    assert [e["kind"] for e in audit].count("revert.paused") == 1

    assert (await cluster.api.post("/api/v1/resume")).json() == {"paused": False}
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "reverted"
    assert node_state(cluster) == {"cordoned": False, "tainted": False, "annotated": False}
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem_id}")).json()
    assert "revert.resumed" in [e["kind"] for e in audit]


async def test_the_phase_the_api_shows_follows_the_undo(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster: Cluster = await make_cluster(**definitions(tmp_path, NOTE_RULE, NOTE_PLAYBOOK))
    rem_id = await remediated(cluster)
    assert (await cluster.only_remediation())["phase"] == "forward"
    r = await cluster.api.post(f"/api/v1/remediations/{rem_id}/revert")
    assert r.status_code == 200 and (r.json()["state"], r.json()["phase"]) == ("reverting", "revert")
    await cluster.settle()
    detail = (await cluster.api.get(f"/api/v1/remediations/{rem_id}")).json()
    assert (detail["state"], detail["phase"]) == ("reverted", "revert")
