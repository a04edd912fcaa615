"""A person's hand change on a quarantined node, made the way kubectl makes it (a strategic-merge or JSON patch
of `spec.unschedulable` / `spec.taints` with fieldManager kubectl-patch / kubectl-edit, as a user of its own),
seen by the node watch: the remediation is let go (`released`), audited with the field manager, its labels
and condition cleaned up, nothing applied again, the breaker no longer counts the node, and a repeat delivery
of the alert quarantines nothing. The controller's own lifts (its undo, a playbook that untaints) are not
hand changes. The same watch wakes a return gate waiting for the reboot as soon as the node is back."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.engine.hand_changes import Marks, _lifted_by_others, lifted_marks
from remediator.store import db
from remediator.store.models import StepRow
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import TAINT_KEY, gpu_node, taints
from tests.helpers import am_alert, am_payload, xid_labels

KUBECTL_UA = "kubectl/v1.31.2 (linux/amd64) kubernetes/5864a46"


async def kubectl(cluster: Cluster, body: Any, *, manager: str, content_type: str, user: str = "alice") -> None:
    """PATCH the node as kubectl does: its User-Agent, a fieldManager, a user's token of its own."""
    token = f"{user}-token"
    cluster.fake.users[token] = f"{user}@example.com"
    async with httpx.AsyncClient(base_url=cluster.fake.url) as client:
        r = await client.patch(
            "/api/v1/nodes/gpu-1", params={"fieldManager": manager}, json=body,
            headers={"Content-Type": content_type, "User-Agent": KUBECTL_UA, "Authorization": f"Bearer {token}"},
        )
    assert r.status_code == 200, r.text


def node(cluster: Cluster) -> dict[str, Any]:
    got = cluster.fake.node("gpu-1")
    assert got is not None
    return got


def marks(cluster: Cluster) -> dict[str, Any]:
    n = node(cluster)
    condition = next((c for c in n["status"].get("conditions") or [] if c["type"] == "GPUHealthy"), None)
    meta = n["metadata"]
    return {
        "cordoned": bool(n["spec"].get("unschedulable")),
        "tainted": any(t["key"] == TAINT_KEY for t in taints(cluster.fake, "gpu-1")),
        "labels": sorted(k for k in meta.get("labels") or {} if k.startswith("remediator.io/")),
        "annotations": sorted(k for k in meta.get("annotations") or {} if k.startswith("remediator.io/")),
        "gpu_healthy": condition["status"] if condition else None,
    }


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.02)


@pytest.fixture
async def watched(make_cluster: MakeCluster) -> AsyncIterator[Callable[..., Awaitable[Cluster]]]:
    """A cluster whose worker runs its node watch (the way `serve` does) beside the test's settles."""
    tasks: list[asyncio.Task[None]] = []

    async def make(**overrides: Any) -> Cluster:
        cluster: Cluster = await make_cluster(**overrides)
        gpu_node(cluster.fake)
        await cluster.worker.refresh_inventory()
        tasks.append(asyncio.create_task(cluster.worker._inventory_loop()))
        return cluster

    yield make
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def quarantined(cluster: Cluster) -> dict[str, Any]:
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded" and rem["playbook"] == "reboot-node"
    assert marks(cluster) == {"cordoned": True, "tainted": True, "labels": ["remediator.io/state"],
                              "annotations": ["remediator.io/remediation"], "gpu_healthy": "False"}
    return rem


async def state_of(cluster: Cluster, rem_id: str) -> str:
    return str((await cluster.api.get(f"/api/v1/remediations/{rem_id}")).json()["state"])


async def test_uncordon_by_strategic_merge_patch_releases_audited_with_the_field_manager(
    watched: Callable[..., Awaitable[Cluster]],
) -> None:
    cluster = await watched()
    rem = await quarantined(cluster)
    guard = (await cluster.api.get("/api/v1/guardrails")).json()
    assert guard["circuit_breaker"]["quarantined_nodes"] == ["gpu-1"]

    await kubectl(cluster, {"spec": {"unschedulable": False}}, manager="kubectl-patch",
                  content_type="application/strategic-merge-patch+json")
    await until(lambda: _is(cluster, rem["id"], "released"))
    await cluster.worker.node_marks.idle()

    # The fake knows who patched (an API server's audit log would); Kubernetes does not put it in the object.
    assert [c.user for c in cluster.fake.calls if c.manager == "kubectl-patch"] == ["alice@example.com"]
    # Released: the cordon stays as the person left it (lifted); the taint is left alone, nothing re-applied;
    # the project's label, annotation and condition are cleaned up.
    assert marks(cluster) == {"cordoned": False, "tainted": True, "labels": [], "annotations": [],
                              "gpu_healthy": "True"}
    detail = (await cluster.api.get(f"/api/v1/remediations/{rem['id']}")).json()
    assert "cordon lifted by hand (kubectl-patch)" in detail["state_reason"]
    events = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    (hand,) = [e for e in events if e["kind"] == "node.changed_by_hand"]
    assert hand["actor"] == "hand:kubectl-patch"
    assert hand["data"]["field_manager"] == "kubectl-patch" and hand["data"]["operation"] == "Update"
    assert hand["data"]["lifted"] == ["cordon"] and hand["data"]["fields"] == ["spec.unschedulable"]
    assert hand["data"]["changed_at"]
    (moved,) = [e for e in events if e["kind"] == "state.released"]
    assert moved["actor"] == "hand:kubectl-patch" and moved["data"]["from"] == "succeeded"
    assert any(e["kind"] == "node.cleaned_up" for e in events)

    # The breaker no longer counts the node; a repeat delivery of the same alert quarantines nothing.
    assert (await cluster.api.get("/api/v1/guardrails")).json()["circuit_breaker"]["quarantined_nodes"] == []
    writes = len(cluster.fake.writes("nodes"))
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()
    assert len((await cluster.api.get("/api/v1/remediations")).json()) == 1
    assert len(cluster.fake.writes("nodes")) == writes
    assert marks(cluster)["cordoned"] is False


async def _is(cluster: Cluster, rem_id: str, state: str) -> bool:
    return await state_of(cluster, rem_id) == state


async def test_taint_removed_by_json_patch_with_kubectl_edit_releases_and_a_new_fault_still_quarantines(
    watched: Callable[..., Awaitable[Cluster]],
) -> None:
    cluster = await watched()
    cluster.fake.write("nodes", None, "gpu-1", {"spec": {"taints": [
        *taints(cluster.fake, "gpu-1"), {"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}]}})
    rem = await quarantined(cluster)
    kept = [t for t in taints(cluster.fake, "gpu-1") if t["key"] != TAINT_KEY]
    index = next(i for i, t in enumerate(taints(cluster.fake, "gpu-1")) if t["key"] == TAINT_KEY)
    await kubectl(cluster, [{"op": "test", "path": f"/spec/taints/{index}/key", "value": TAINT_KEY},
                            {"op": "remove", "path": f"/spec/taints/{index}"}],
                  manager="kubectl-edit", content_type="application/json-patch+json", user="bob")
    await until(lambda: _is(cluster, rem["id"], "released"))
    await cluster.worker.node_marks.idle()
    events = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    (hand,) = [e for e in events if e["kind"] == "node.changed_by_hand"]
    assert hand["data"]["field_manager"] == "kubectl-edit"
    assert hand["data"]["lifted"] == [f"taint {TAINT_KEY}:NoSchedule"]
    # Nothing re-applied: the person's taint list stands, the cordon is left as it was.
    assert taints(cluster.fake, "gpu-1") == kept
    assert marks(cluster)["cordoned"] is True and marks(cluster)["labels"] == []

    # A new, different fault on the node still starts a remediation (another rule: no cooldown between them).
    await cluster.post(am_payload(am_alert({**xid_labels("gpu-1", 48), "alertname": "GPUXidError"},
                                           starts_at="2026-12-02T11:00:00Z")))
    await cluster.settle()
    rems = (await cluster.api.get("/api/v1/remediations")).json()
    assert len(rems) == 2 and {r["state"] for r in rems} >= {"released"}


async def test_the_controllers_own_undo_is_not_a_hand_change(watched: Callable[..., Awaitable[Cluster]]) -> None:
    cluster = await watched()
    rem = await quarantined(cluster)
    cluster.fake.reboot_node("gpu-1")
    assert (await cluster.api.post(f"/api/v1/remediations/{rem['id']}/revert")).status_code == 200
    await cluster.settle()
    await cluster.worker.node_marks.idle()
    assert await state_of(cluster, rem["id"]) == "reverted"
    events = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    assert not [e for e in events if e["kind"] in ("node.changed_by_hand", "state.released")]


async def test_a_return_gate_waiting_for_the_reboot_goes_on_when_the_watch_sees_the_node_back(
    watched: Callable[..., Awaitable[Cluster]],
) -> None:
    cluster = await watched()
    rem = await quarantined(cluster)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79), status="resolved")))
    await cluster.settle()
    assert await state_of(cluster, rem["id"]) == "reverting"  # waits 30 s between looks for the new boot
    loop = asyncio.create_task(cluster.worker._loop())
    try:
        started = time.monotonic()
        cluster.fake.reboot_node("gpu-1")
        await until(lambda: _is(cluster, rem["id"], "reverted"), timeout=10)
        assert time.monotonic() - started < 10  # not the step's 30 s poll
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    events = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    assert not [e for e in events if e["kind"] == "node.changed_by_hand"]


async def test_a_hand_uncordon_while_the_database_is_locked_releases_once_it_answers(
    watched: Callable[..., Awaitable[Cluster]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """The watch records the uncordon at once, but the release cannot be written while another connection holds
    the SQLite file's write lock: the observation is kept and the release happens when the database answers."""
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 1)  # a writer gives up after 1 s instead of 30 s
    cluster = await watched()
    rem = await quarantined(cluster)
    health = cluster.rt.repo.health
    locker = sqlite3.connect(tmp_path / "c.db", timeout=30, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # the file's write lock, held by another connection
    try:
        await kubectl(cluster, {"spec": {"unschedulable": False}}, manager="kubectl-patch",
                      content_type="application/strategic-merge-patch+json")
        await until(lambda: _true(health.problem is not None), timeout=15)  # the release failed on the lock
        await asyncio.sleep(1.5)  # and fails again meanwhile
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    await until(lambda: _is(cluster, rem["id"], "released"), timeout=30)
    await cluster.worker.node_marks.idle()
    assert health.problem is None
    events = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    (hand,) = [e for e in events if e["kind"] == "node.changed_by_hand"]
    assert hand["actor"] == "hand:kubectl-patch" and hand["data"]["lifted"] == ["cordon"]
    assert marks(cluster) == {"cordoned": False, "tainted": True, "labels": [], "annotations": [],
                              "gpu_healthy": "True"}


async def _true(value: bool) -> bool:
    return value


async def test_a_hand_uncordon_while_no_controller_ran_is_noticed_at_start_up(make_cluster: MakeCluster) -> None:
    """Controller stopped, node uncordoned by hand through the API server, controller started: its start-up
    compares each held node with its marks after the first list and releases the remediation, audited; a held
    node nobody touched stays held."""
    first: Cluster = await make_cluster()
    gpu_node(first.fake)
    first.fake.add_node("gpu-2", labels={"nvidia.com/gpu.present": "true"})
    await first.worker.refresh_inventory()
    rem = await quarantined(first)
    await first.post(am_payload(am_alert(xid_labels("gpu-2", 79))))
    await first.settle()
    rems = (await first.api.get("/api/v1/remediations")).json()
    other = next(r for r in rems if r["node"] == "gpu-2")
    assert other["state"] == "succeeded"
    await first.worker.stop()  # no controller runs from here on

    await kubectl(first, {"spec": {"unschedulable": False}}, manager="kubectl-patch",
                  content_type="application/strategic-merge-patch+json")

    second: Cluster = await make_cluster()  # a controller starts on the same database and lists the nodes
    await second.worker.start()
    await until(lambda: _is(second, rem["id"], "released"))
    await second.worker.node_marks.idle()
    events = (await second.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    (hand,) = [e for e in events if e["kind"] == "node.changed_by_hand"]
    assert hand["actor"] == "hand:kubectl-patch" and hand["data"]["field_manager"] == "kubectl-patch"
    assert hand["data"]["lifted"] == ["cordon"]
    assert marks(second)["labels"] == [] and marks(second)["cordoned"] is False
    assert await state_of(second, other["id"]) == "succeeded"
    guard = (await second.api.get("/api/v1/guardrails")).json()
    assert guard["circuit_breaker"]["quarantined_nodes"] == ["gpu-2"]


def test_a_mark_a_dry_run_only_described_is_never_taken_as_lifted() -> None:
    """DRY_RUN with cluster credentials records its cordon and taint steps `succeeded` (output `dry_run`) and
    places nothing: the reconcile must not read the node's missing cordon as a person's uncordon."""
    bare = Marks(unschedulable=False, taints=frozenset(), boot_id="b", ready=True)
    rows = [
        StepRow(phase="forward", idx=0, name="cordon", action="cordon", status="succeeded", params={},
                output={"changed": False, "message": "dry run: cordon node gpu-1", "dry_run": True}),
        StepRow(phase="forward", idx=1, name="taint", action="taint", status="succeeded", params={"key": TAINT_KEY},
                output={"changed": False, "message": "dry run: taint node gpu-1", "dry_run": True}),
    ]
    assert lifted_marks(bare, rows) == []
    placed = [StepRow(phase="forward", idx=0, name="cordon", action="cordon", status="succeeded", params={},
                      output={"changed": True, "message": "cordoned"})]
    assert [m.what for m in lifted_marks(bare, placed)] == ["cordon"]


def test_a_mark_the_remediations_own_undo_lifted_is_not_a_hand_change_after_the_undo_failed() -> None:
    """An undo that untainted (the whole `spec.taints` removed: no field manager left) and then failed at the
    uncordon ends `failed`, still holding the node: a later reconcile must not take the gone taint as a hand
    change, while a cordon lifted by someone else still is one."""
    forward = [
        StepRow(phase="forward", idx=0, name="taint", action="taint", status="succeeded", params={"key": TAINT_KEY},
                output={"changed": True}),
        StepRow(phase="forward", idx=1, name="cordon", action="cordon", status="succeeded", params={},
                output={"changed": True}),
    ]
    undo = [StepRow(phase="revert", idx=0, name="taint", action="untaint", status="succeeded", params={},
                    output={"changed": True}),
            StepRow(phase="revert", idx=1, name="cordon", action="uncordon", status="failed", params={}, output={})]
    untainted = Marks(unschedulable=True, taints=frozenset(), boot_id="b", ready=True)
    assert _lifted_by_others(untainted, [*forward, *undo]) == []
    bare = Marks(unschedulable=False, taints=frozenset(), boot_id="b", ready=True)
    assert [m.what for m in _lifted_by_others(bare, [*forward, *undo])] == ["cordon"]
