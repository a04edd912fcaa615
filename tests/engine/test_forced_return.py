"""A person's forced return to service through the real HTTP API, against the strict fake API server: whatever
the remediation is doing (awaiting its reboot, waiting for its alert to resolve, awaiting approval), `return`
stops it, undoes what holds the node and ends `returned`, on the record (actor, reason, skips)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from remediator.actions.base import ActionContext, ActionResult
from remediator.actions.validation import ValidateGpu
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.definitions import GATED_PLAYBOOK, GATED_RULE, definitions, note_alert
from tests.engine.test_pipeline import TAINT_KEY, gpu_node, taints
from tests.helpers import am_alert, am_payload, xid_labels


class HeldGate(ValidateGpu):
    """validate_gpu that passes only once the test lets it (to see a return wait for its gate)."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = asyncio.Event()
        self.open = asyncio.Event()

    async def run(self, ctx: ActionContext, params: Any) -> ActionResult:
        self.reached.set()
        await self.open.wait()
        return ActionResult(changed=False, message="validated", output={"verdict": "pass", "failed": {}, "gpus": []})


def node_of(cluster: Cluster) -> dict[str, Any]:
    node = cluster.fake.node("gpu-1")
    assert node is not None
    return node


def held(cluster: Cluster) -> dict[str, Any]:
    node = node_of(cluster)
    condition = next((c for c in node["status"].get("conditions") or [] if c["type"] == "GPUHealthy"), None)
    return {
        "cordoned": bool(node["spec"].get("unschedulable")),
        "tainted": any(t["key"] == TAINT_KEY for t in taints(cluster.fake, "gpu-1")),
        "labels": sorted(k for k in node["metadata"].get("labels") or {} if k.startswith("remediator.io/")),
        "gpu_healthy": condition["status"] if condition else None,
    }


async def audit_of(cluster: Cluster, rem_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = (await cluster.api.get(f"/api/v1/audit?remediation={rem_id}")).json()
    return events


async def quarantined(make_cluster: MakeCluster) -> tuple[Cluster, str]:
    """A cluster whose gpu-1 an Xid 79 alert has quarantined: the cluster and that remediation's ID."""
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()
    return cluster, str((await cluster.only_remediation())["id"])


async def awaiting_approval(make_cluster: MakeCluster, tmp_path: Path) -> tuple[Cluster, str]:
    """A cluster whose gpu-1 is tainted by the gated playbook, its cordon awaiting approval: the cluster and
    that remediation's ID."""
    cluster: Cluster = await make_cluster(**definitions(tmp_path, GATED_RULE, GATED_PLAYBOOK))
    cluster.fake.add_node("gpu-1")
    await cluster.post(am_payload(note_alert("gpu-1", "hi")))
    await cluster.settle()
    return cluster, str((await cluster.only_remediation())["id"])


async def test_xid79_awaiting_its_reboot_returned_with_both_skips(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79), status="resolved")))
    await cluster.settle()
    rem = await cluster.only_remediation()
    # No reboot yet: the return gate waits for a new boot ID, and the node stays quarantined.
    assert rem["state"] == "reverting" and "boot" in (rem["state_reason"] or "")
    assert held(cluster) == {"cordoned": True, "tainted": True, "labels": ["remediator.io/state"],
                             "gpu_healthy": "False"}

    r = await cluster.api.post(f"/api/v1/remediations/{rem['id']}/return",
                               json={"reason": "hardware swapped, verified by hand", "skip": ["reboot", "validation"],
                                     "by": "alice"})
    assert r.status_code == 200, r.text
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "returned"
    assert rem["state_reason"] == ("returned to service by api:alice: hardware swapped, verified by hand; "
                                   "skipping reboot and validation")
    assert rem["return_request"]["skip"] == ["reboot", "validation"]
    assert held(cluster) == {"cordoned": False, "tainted": False, "labels": [], "gpu_healthy": "True"}
    gate = {s["name"]: s for s in rem["steps"] if s["phase"] == "revert" and s["name"].startswith("gate:")}
    assert {n: s["status"] for n, s in gate.items()} == {"gate:rebooted": "skipped", "gate:validate": "skipped"}
    assert "api:alice" in gate["gate:validate"]["output"]["reason"]

    events = await audit_of(cluster, rem["id"])
    requested = [e for e in events if e["kind"] == "state.reverting" and e["data"]["event"] == "return"]
    assert len(requested) == 1 and requested[0]["actor"] == "api:alice"
    assert requested[0]["data"]["return"] == {"actor": "api:alice", "reason": "hardware swapped, verified by hand",
                                              "skip": ["reboot", "validation"], "from": "reverting"}
    (returned,) = [e for e in events if e["kind"] == "state.returned"]
    assert returned["actor"] == "api:alice"
    assert returned["data"]["return"]["skip"] == ["reboot", "validation"]
    assert returned["data"]["return"]["reason"] == "hardware swapped, verified by hand"
    # A returned remediation holds nothing: neither return nor revert again.
    again = await cluster.api.post(f"/api/v1/remediations/{rem['id']}/return", json={"reason": "again"})
    assert again.status_code == 409 and "returned" in again.text and "holds nothing" in again.text
    listed = (await cluster.api.get("/api/v1/remediations?state=returned")).json()
    assert [x["id"] for x in listed] == [rem["id"]]


async def test_quarantine_waiting_for_resolve_returned_without_skip_waits_for_the_gate(
    make_cluster: MakeCluster,
) -> None:
    cluster: Cluster = await make_cluster()
    gate = HeldGate()
    assert isinstance(cluster.rt.actions, dict)
    cluster.rt.actions["validate_gpu"] = gate
    gpu_node(cluster.fake)
    labels = {"alertname": "GPURecoveryActionRequired", "Hostname": "gpu-1", "recovery_action": "3",
              "UUID": "GPU-8e6a1c2d-0000-4000-8000-000000000001", "gpu": "0"}
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["playbook"] == "quarantine-node" and rem["state"] == "succeeded"  # waits for its alert to resolve
    assert held(cluster)["tainted"] and held(cluster)["cordoned"]

    r = await cluster.api.post(f"/api/v1/remediations/{rem['id']}/return", json={"reason": "need the capacity"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "reverting"
    driving = asyncio.create_task(cluster.settle())
    async with asyncio.timeout(20):
        await gate.reached.wait()
    # The gate runs first; until it passes the node stays quarantined.
    assert held(cluster)["tainted"] and held(cluster)["cordoned"]
    assert (await cluster.only_remediation())["state"] == "reverting"
    gate.open.set()
    await driving

    rem = await cluster.only_remediation()
    assert rem["state"] == "returned"
    assert held(cluster) == {"cordoned": False, "tainted": False, "labels": [], "gpu_healthy": "True"}
    steps = [(s["name"], s["status"]) for s in rem["steps"] if s["phase"] == "revert"]
    assert ("gate:validate", "succeeded") in steps
    (returned,) = [e for e in await audit_of(cluster, rem["id"]) if e["kind"] == "state.returned"]
    assert returned["actor"] == "api" and returned["data"]["return"]["skip"] == []


async def test_awaiting_approval_returned_supersedes_the_approval(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster: Cluster = await make_cluster(**definitions(tmp_path, GATED_RULE, GATED_PLAYBOOK))
    cluster.fake.add_node("gpu-1")
    await cluster.post(am_payload(note_alert("gpu-1", "hi")))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "awaiting_approval" and held(cluster)["tainted"]
    pending = (await cluster.api.get("/api/v1/approvals?status=pending")).json()
    assert [a["remediation_id"] for a in pending] == [rem["id"]]

    r = await cluster.api.post(f"/api/v1/remediations/{rem['id']}/return", json={"reason": "false alarm", "by": "bob"})
    assert r.status_code == 200, r.text
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "returned" and not held(cluster)["tainted"] and not held(cluster)["cordoned"]

    assert (await cluster.api.get("/api/v1/approvals?status=pending")).json() == []
    (superseded,) = (await cluster.api.get("/api/v1/approvals?status=superseded")).json()
    assert superseded["remediation_id"] == rem["id"] and superseded["status"] == "superseded"
    assert superseded["decided_by"] == "api:bob" and superseded["decision_source"] == "return"
    events = await audit_of(cluster, rem["id"])
    assert [e["actor"] for e in events if e["kind"] == "approval.superseded"] == ["api:bob"]
    # Approving it now says it was superseded, by whom.
    late = await cluster.api.post(f"/api/v1/remediations/{rem['id']}/approve", json={"by": "carol"})
    assert late.status_code == 409 and "superseded by api:bob" in late.text


async def test_cancel_supersedes_the_open_approval_and_requires_a_reason(
    make_cluster: MakeCluster, tmp_path: Path
) -> None:
    cluster, rem_id = await awaiting_approval(make_cluster, tmp_path)
    missing = await cluster.api.post(f"/api/v1/remediations/{rem_id}/cancel")
    assert missing.status_code == 422
    blank = await cluster.api.post(f"/api/v1/remediations/{rem_id}/cancel", json={"reason": "  "})
    assert blank.status_code == 422 and "reason" in blank.text
    r = await cluster.api.post(f"/api/v1/remediations/{rem_id}/cancel", json={"reason": "wrong node", "by": "dan"})
    assert r.status_code == 200 and r.json()["state_reason"] == "cancelled by api:dan: wrong node"
    (approval,) = (await cluster.api.get(f"/api/v1/approvals?remediation={rem_id}")).json()
    assert approval["status"] == "superseded" and approval["decided_by"] == "api:dan"
    assert approval["decision_source"] == "cancel"
    (cancelled,) = [e for e in await audit_of(cluster, rem_id) if e["kind"] == "state.cancelled"]
    assert cancelled["actor"] == "api:dan" and cancelled["data"]["reason"] == "wrong node"


async def test_return_needs_a_reason_and_known_skips(make_cluster: MakeCluster) -> None:
    cluster, rem_id = await quarantined(make_cluster)
    url = f"/api/v1/remediations/{rem_id}/return"
    for body in ({}, {"skip": ["reboot"]}, {"reason": ""}):
        r = await cluster.api.post(url, json=body)
        assert r.status_code == 422 and "reason" in r.text, (body, r.text)
    unknown = await cluster.api.post(url, json={"reason": "x", "skip": ["drain"]})
    assert unknown.status_code == 422 and "skip" in unknown.text
    assert (await cluster.only_remediation())["state"] == "succeeded"  # nothing changed


async def test_revert_in_a_wrong_state_names_the_state_and_points_at_return(
    make_cluster: MakeCluster, tmp_path: Path
) -> None:
    cluster, rem_id = await awaiting_approval(make_cluster, tmp_path)
    r = await cluster.api.post(f"/api/v1/remediations/{rem_id}/revert")
    assert r.status_code == 409
    text = r.json()["error"]
    assert "awaiting_approval" in text and "return" in text and "Event." not in text and "<" not in text


async def test_a_remediation_that_holds_nothing_cannot_be_returned(make_cluster: MakeCluster) -> None:
    cluster, rem_id = await quarantined(make_cluster)
    cluster.fake.reboot_node("gpu-1")
    assert (await cluster.api.post(f"/api/v1/remediations/{rem_id}/revert")).status_code == 200
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "reverted"
    r = await cluster.api.post(f"/api/v1/remediations/{rem_id}/return", json={"reason": "x"})
    assert r.status_code == 409 and "remediation is reverted" in r.json()["error"]
