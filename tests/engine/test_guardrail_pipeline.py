"""Guardrails through the whole pipeline on the fake API server: opt-outs, flapping, repeat offenders,
Xid escalation, the kill switch mid-run and the circuit breaker as the UI shows it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sqlalchemy import event

from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import TAINT_KEY, gpu_node, taints
from tests.helpers import am_alert, am_payload, xid_labels

NO_COOLDOWN_RULE = """rules:
  - name: fatal-xid-no-cooldown
    match: ['alertname="GPUXidError"', 'xid="79"']
    playbook: reboot-node
    priority: 100
"""


def rules_without_cooldown(tmp_path: Path) -> Path:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "fatal.yaml").write_text(NO_COOLDOWN_RULE)
    return rules


def firing(node: str, minute: int, **extra: str) -> dict[str, Any]:
    return am_alert(xid_labels(node, 79, **extra), starts_at=f"2026-12-02T10:{minute:02d}:00Z")


def resolved(node: str, minute: int) -> dict[str, Any]:
    return am_alert(xid_labels(node, 79), status="resolved", starts_at=f"2026-12-02T10:{minute:02d}:00Z")


async def states(cluster: Cluster) -> list[tuple[str, str]]:
    rems = (await cluster.api.get("/api/v1/remediations")).json()
    return [(r["state"], r["state_reason"] or "") for r in reversed(rems)]


async def test_a_node_labelled_exclude_is_held_and_never_touched(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    cluster.fake.write("nodes", None, "gpu-1", {"metadata": {"labels": {"remediator.io/exclude": "true"}}})
    await cluster.post(am_payload(firing("gpu-1", 0)))
    await cluster.settle()
    [(state, reason)] = await states(cluster)
    assert state == "held" and "remediator.io/exclude=true" in reason
    assert not [c for c in cluster.fake.writes("nodes")] and not cluster.fake.requests("evict")


async def test_pods_in_an_opted_out_namespace_are_not_evicted(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    cluster.fake.add_namespace("research")
    cluster.fake.add_pod("notebook-0", "research", node="gpu-1", gpus=1)
    cluster.fake.write("namespaces", None, "research", {"metadata": {"annotations": {"remediator.io/exclude": "true"}}})
    await cluster.post(am_payload(firing("gpu-1", 0)))
    await cluster.settle()
    evicted = {(c.namespace, c.name) for c in cluster.fake.requests("evict")}
    assert evicted == {("ml", "trainer-abc-1"), ("ml", "trainer-abc-2")}
    rem = (await cluster.api.get("/api/v1/remediations")).json()[0]
    detail = (await cluster.api.get(f"/api/v1/remediations/{rem['id']}")).json()
    drain = next(s for s in detail["steps"] if s["name"] == "drain")
    assert {"namespace": "research", "name": "notebook-0"}.items() <= next(
        p for p in drain["output"]["skipped"] if p["name"] == "notebook-0"
    ).items()


async def test_a_flapping_alert_holds_its_target(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster: Cluster = await make_cluster(  # no escalation ladder: the guardrail alone is under test
        rules_dir=rules_without_cooldown(tmp_path), flap_threshold=3, node_repeat_limit=0, escalation_ladder=[]
    )
    gpu_node(cluster.fake)
    for minute in range(3):
        await cluster.post(am_payload(firing("gpu-1", minute)))
        await cluster.settle()
        cluster.fake.reboot_node("gpu-1")  # the return gate wants proof of a reboot
        await cluster.post(am_payload(resolved("gpu-1", minute)))
        await cluster.settle()
    await cluster.post(am_payload(firing("gpu-1", 3)))
    await cluster.settle()
    history = await states(cluster)
    assert [s for s, _ in history[:3]] == ["reverted"] * 3
    assert history[3][0] == "held" and "flapping" in history[3][1]


async def test_a_node_remediated_twice_is_held_for_a_human_who_can_release_it(
    make_cluster: MakeCluster, tmp_path: Path
) -> None:
    cluster: Cluster = await make_cluster(  # no escalation ladder: the guardrail alone is under test
        rules_dir=rules_without_cooldown(tmp_path), flap_threshold=0, escalation_ladder=[]
    )
    gpu_node(cluster.fake)
    for minute in range(2):
        await cluster.post(am_payload(firing("gpu-1", minute)))
        await cluster.settle()
        cluster.fake.reboot_node("gpu-1")  # the return gate wants proof of a reboot
        await cluster.post(am_payload(resolved("gpu-1", minute)))
        await cluster.settle()
    await cluster.post(am_payload(firing("gpu-1", 2)))
    await cluster.settle()
    third = (await cluster.api.get("/api/v1/remediations")).json()[0]
    assert third["state"] == "held" and "remediated 2 times" in third["state_reason"]
    assert not [t for t in taints(cluster.fake, "gpu-1") if t["key"] == TAINT_KEY]

    r = await cluster.api.post(f"/api/v1/remediations/{third['id']}/release")
    assert r.status_code == 200
    await cluster.rt.repo.wake_held()
    await cluster.settle()
    detail = (await cluster.api.get(f"/api/v1/remediations/{third['id']}")).json()
    assert detail["state"] == "succeeded"
    kinds = [e["kind"] for e in (await cluster.api.get("/api/v1/audit")).json()]
    assert "guardrail.override" in kinds


async def test_repeated_application_xids_on_one_gpu_escalate_to_a_gpu_reset(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    for minute, pod in enumerate(["trainer-abc-1", "trainer-abc-2", "trainer-abc-1"]):
        labels = xid_labels("gpu-1", 13, exported_pod=pod, exported_namespace="ml")
        await cluster.post(am_payload(am_alert(labels, starts_at=f"2026-12-02T10:{minute:02d}:00Z")))
        await cluster.settle()
    rems = (await cluster.api.get("/api/v1/remediations")).json()
    rules = [r["rule"] for r in reversed(rems)]
    assert rules[0] == "xid-application"
    assert rules[-1] == "escalation:repeated-application-xid"
    assert rems[0]["playbook"] == "reset-gpu"


async def test_pause_stops_a_running_remediation_before_its_next_mutating_step(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    fake = cluster.fake
    gpu_node(fake)
    fake.write("pods", "ml", "trainer-abc-2", {"metadata": {"labels": {"protected": "yes"}}})
    fake.add_pdb("hold", "ml", match_labels={"protected": "yes"}, min_available=1)
    await cluster.post(am_payload(firing("gpu-1", 0)))
    running = asyncio.create_task(cluster.settle(60))
    async with asyncio.timeout(30):
        while not any(c.verb == "evict" and c.status == 429 for c in fake.calls):
            await asyncio.sleep(0.02)
    assert (await cluster.api.post("/api/v1/pause", json={"reason": "test"})).json() == {"paused": True}
    fake.remove("poddisruptionbudgets", "ml", "hold")
    await running
    rem = (await cluster.api.get("/api/v1/remediations")).json()[0]
    assert rem["state"] == "held" and "paused" in (rem["state_reason"] or "")
    detail = (await cluster.api.get(f"/api/v1/remediations/{rem['id']}")).json()
    done = [s["name"] for s in detail["steps"] if s["status"] == "succeeded"]
    assert done == ["taint", "cordon", "drain"]  # the drain in flight finished; the label did not happen
    node = fake.node("gpu-1") or {}
    assert node["metadata"]["labels"].get("remediator.io/state") != "reboot-required"

    await cluster.api.post("/api/v1/resume")
    await cluster.settle()
    assert (await cluster.api.get(f"/api/v1/remediations/{rem['id']}")).json()["state"] == "succeeded"


async def test_the_ui_banner_shows_a_tripped_breaker_while_it_lasts(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster(max_quarantined_nodes="1")
    gpu_node(cluster.fake, "gpu-1")
    cluster.fake.add_node("gpu-2", labels={"nvidia.com/gpu.present": "true"})
    await cluster.post(am_payload(firing("gpu-1", 0)))
    await cluster.settle()
    await cluster.post(am_payload(firing("gpu-2", 1)))
    await cluster.settle()
    page = (await cluster.api.get("/")).text
    assert "Circuit breaker tripped: 1 of at most 1 nodes quarantined." in page
    status = (await cluster.api.get("/api/v1/guardrails")).json()
    assert status["circuit_breaker"]["tripped"] and [h["node"] for h in status["held"]] == ["gpu-2"]

    cluster.fake.reboot_node("gpu-1")  # the return gate wants proof of a reboot
    await cluster.post(am_payload(resolved("gpu-1", 0)))
    await cluster.settle()
    await cluster.settle()
    page = (await cluster.api.get("/")).text
    assert "Circuit breaker tripped" not in page
    assert [s for s, _ in await states(cluster)] == ["reverted", "succeeded"]


async def test_room_under_the_breaker_goes_to_the_oldest_held_not_to_a_newcomer(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster(max_quarantined_nodes="1")
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        cluster.fake.add_node(name, labels={"nvidia.com/gpu.present": "true"})
    await cluster.post(am_payload(firing("gpu-1", 0)))
    await cluster.settle()
    await cluster.post(am_payload(firing("gpu-2", 1)))  # held by the breaker: gpu-1 takes the one place
    await cluster.settle()
    cluster.rt.settings = cluster.rt.settings.model_copy(update={"max_quarantined_nodes": "2"})  # room for one
    await cluster.post(am_payload(firing("gpu-3", 2)))  # admitted before gpu-2's next re-check comes round
    await cluster.settle()
    by_node = {r["node"]: r for r in (await cluster.api.get("/api/v1/remediations")).json()}
    assert by_node["gpu-3"]["state"] == "held" and "1 held before this one" in by_node["gpu-3"]["state_reason"]
    assert not [t for t in taints(cluster.fake, "gpu-3") if t["key"] == TAINT_KEY]

    await cluster.rt.repo.wake_held()  # the re-check: the place goes to gpu-2, held first
    await cluster.settle()
    by_node = {r["node"]: r for r in (await cluster.api.get("/api/v1/remediations")).json()}
    assert by_node["gpu-2"]["state"] in ("running", "succeeded")
    assert by_node["gpu-3"]["state"] == "held" and "2 of at most 2" in by_node["gpu-3"]["state_reason"]


async def test_admissions_that_arrive_together_go_in_one_batch_oldest_first_within_the_breaker(
    make_cluster: MakeCluster,
) -> None:
    """A storm's admissions are taken to the store together (engine/admissions.py): one transaction
    decides them oldest first, each seeing the quarantines started before it, so the breaker holds exactly;
    the facts about each remediation alone are read for the whole batch in one statement."""
    cluster: Cluster = await make_cluster(max_quarantined_nodes="3", worker_concurrency=16)
    nodes = [f"gpu-{i}" for i in range(1, 9)]
    for name in nodes:
        cluster.fake.add_node(name, labels={"nvidia.com/gpu.present": "true"})
    batches: list[int] = []
    admit_many = cluster.rt.repo.admit_many

    async def recorded(requests: Any) -> Any:
        batches.append(len(requests))
        return await admit_many(requests)

    cluster.rt.repo.admit_many = recorded  # type: ignore[method-assign]
    breaker_reads: list[str] = []
    steady_reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        quarantined = "DISTINCT remediations.node" in statement and "WHERE remediations.quarantined" in statement
        starts = "count(*)" in statement and "FROM audit_events" in statement
        if (quarantined or starts) and "controller_state" not in statement:
            breaker_reads.append(statement)
        if "EXISTS (SELECT" in statement and "controller_state" in statement:  # pause, override, flaps, history
            steady_reads.append(statement)

    event.listen(cluster.engine.sync_engine, "before_cursor_execute", count)
    await cluster.post(am_payload(*(firing(name, i) for i, name in enumerate(nodes))))
    await cluster.settle()
    event.remove(cluster.engine.sync_engine, "before_cursor_execute", count)

    assert max(batches) > 1  # the eight arrived together and were not admitted one transaction each
    # Under the lock the breaker's counts are read once a batch, not once a request of the batch.
    assert 0 < len(breaker_reads) <= 2 * len(batches)
    # Before the lock, each remediation's own facts are read for the whole batch in one statement.
    assert 0 < len(steady_reads) <= len(batches) < sum(batches)
    rems = sorted((await cluster.api.get("/api/v1/remediations")).json(), key=lambda r: r["created_at"])
    admitted = [r["node"] for r in rems if r["state"] in ("running", "succeeded")]
    held = [r["node"] for r in rems if r["state"] == "held"]
    assert admitted == nodes[:3] and held == nodes[3:]  # the oldest three, never a fourth
    assert [n for n in nodes if any(t["key"] == TAINT_KEY for t in taints(cluster.fake, n))] == nodes[:3]
