"""How a remediation ends when a call fails for good, and what a re-delivery of its alert does then.

A permanent error (422 Invalid for a pod name, 403) ends the remediation once with the API's message instead
of counting crashes; the cooldown is for remediations that ran, so an alert still firing after one that the
driver's crashes ended starts a new remediation, while one after a remediation that ran is held back.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from remediator.retrying import WAITING_PREFIX
from remediator.store.models import Remediation
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.engine.test_transient_faults import run_until, state_is
from tests.helpers import am_alert, am_payload, xid_labels

STARTS_AT = "2026-12-02T10:00:00Z"


async def test_a_pod_name_the_api_refuses_fails_the_remediation_once_with_the_message(
    make_cluster: MakeCluster,
) -> None:
    cluster: Cluster = await make_cluster(crash_backoff="0.05")
    gpu_node(cluster.fake)
    labels = xid_labels("gpu-1", 79, exported_pod="Bad_Name.x", exported_namespace="ml")
    await cluster.post(am_payload(am_alert(labels)))
    for _ in range(3):
        await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "failed" and rem["crashes"] == 0
    assert rem["state_reason"].startswith("reading the context failed: Invalid: ")
    assert "pod name 'Bad_Name.x' is not an RFC 1123 subdomain" in rem["state_reason"]
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    kinds = [e["kind"] for e in audit]
    assert kinds.count("state.failed") == 1 and "remediation.crashed" not in kinds
    assert not cluster.fake.writes("nodes")  # nothing was done to the node


async def redeliver(cluster: Cluster, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The alert again, still firing, exactly as Alertmanager re-sends it (repeat_interval, or after a 5xx): the
    same fingerprint and startsAt, stored as a repeat. The remediations afterwards, oldest first."""
    await cluster.post(am_payload(am_alert(labels, starts_at=STARTS_AT)))
    await cluster.settle()
    rems = (await cluster.api.get("/api/v1/remediations")).json()
    return sorted(rems, key=lambda r: str(r["created_at"]))


async def redelivered(cluster: Cluster) -> list[dict[str, Any]]:
    """The `alert.redelivered` events of the audit log."""
    return [e for e in (await cluster.api.get("/api/v1/audit")).json() if e["kind"] == "alert.redelivered"]


async def crashing_cluster(make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch) -> tuple[Cluster, Any]:
    """A cluster whose driver crashes once on every remediation (max_crashes 1); returns it with the undo."""
    cluster: Cluster = await make_cluster(max_crashes=1)
    gpu_node(cluster.fake)
    real_forward = cluster.worker.executor._forward

    async def explode(rem: Remediation, **_: object) -> None:
        raise RuntimeError("the driver failed")

    monkeypatch.setattr(cluster.worker.executor, "_forward", explode)
    return cluster, lambda: monkeypatch.setattr(cluster.worker.executor, "_forward", real_forward)


async def test_a_redelivery_after_a_remediation_ended_by_crashes_starts_a_new_one(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, heal = await crashing_cluster(make_cluster, monkeypatch)
    labels = xid_labels("gpu-1", 79)
    await cluster.post(am_payload(am_alert(labels, starts_at=STARTS_AT)))
    await cluster.settle()
    first = await cluster.only_remediation()
    assert first["state"] == "failed" and first["crashes"] == 1

    heal()
    rems = await redeliver(cluster, labels)  # the rule's 1h cooldown does not hold it back either
    assert [r["state"] for r in rems] == ["failed", "succeeded"]
    events = await redelivered(cluster)
    assert len(events) == 1 and events[0]["remediation_id"] == first["id"]
    assert events[0]["data"]["reason"] == (
        "re-delivered after crashed 1 times in a row; last error: RuntimeError: the driver failed: deciding again")
    alerts = (await cluster.api.get("/api/v1/alerts")).json()
    assert sorted((a["state"], a["outcome"], a["remediation_id"]) for a in alerts) == [
        ("done", "started", rems[1]["id"]), ("repeat", None, None)]

    # Once decided again, the next repeat reads the remediation that ran: a repeat, nothing decided.
    assert len(await redeliver(cluster, labels)) == 2 and len(await redelivered(cluster)) == 1


async def test_duplicate_redeliveries_at_once_decide_the_alert_again_once(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HA Alertmanager pair sends the same repeat twice at the same moment, and one webhook holds it twice:
    one new decision, one new remediation."""
    cluster, heal = await crashing_cluster(make_cluster, monkeypatch)
    labels = xid_labels("gpu-1", 79)
    await cluster.post(am_payload(am_alert(labels, starts_at=STARTS_AT)))
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "failed"
    heal()
    again = am_alert(labels, starts_at=STARTS_AT)
    await asyncio.gather(*(cluster.post(am_payload(again)) for _ in range(3)), cluster.post(am_payload(again, again)))
    await cluster.settle()
    rems = (await cluster.api.get("/api/v1/remediations")).json()
    assert sorted(r["state"] for r in rems) == ["failed", "succeeded"]
    assert len(await redelivered(cluster)) == 1


async def test_a_redelivery_after_a_remediation_that_ran_is_held_by_the_cooldown(make_cluster: MakeCluster) -> None:
    """A repeat after a remediation that succeeded stays a repeat; a later firing (new startsAt) meets the
    cooldown."""
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    labels = xid_labels("gpu-1", 79)
    await cluster.post(am_payload(am_alert(labels, starts_at=STARTS_AT)))
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "succeeded"
    assert len(await redeliver(cluster, labels)) == 1
    assert not await redelivered(cluster)
    await cluster.post(am_payload(am_alert(labels, starts_at="2026-12-02T10:05:00Z")))
    await cluster.settle()
    alerts = (await cluster.api.get("/api/v1/alerts")).json()
    assert sorted(str(a["outcome"]) for a in alerts) == ["None", "cooldown", "started"]


async def test_a_redelivery_while_the_remediation_runs_or_after_the_playbook_failed_it_stays_a_repeat(
    make_cluster: MakeCluster,
) -> None:
    """Running (waiting for the throttling API), then failed by its taint step (a permanent 403): each repeat is
    stored as a repeat and decides nothing."""
    cluster: Cluster = await make_cluster(transient_budget_s=0.3, dependency_recheck_s=0.2)
    fake = cluster.fake
    gpu_node(fake)
    throttled = fake.faults.add(429, verb="patch", plural="nodes", retry_after=1)
    labels = xid_labels("gpu-1", 79)
    await cluster.post(am_payload(am_alert(labels, starts_at=STARTS_AT)))

    async def waiting() -> bool:
        rems = (await cluster.api.get("/api/v1/remediations")).json()
        return bool(rems) and (rems[0]["state_reason"] or "").startswith(WAITING_PREFIX)

    await run_until(cluster, waiting, timeout=30)
    await cluster.post(am_payload(am_alert(labels, starts_at=STARTS_AT)))
    await cluster.worker.run_once()
    rem = await cluster.only_remediation()
    assert rem["state"] == "running"

    fake.faults.scheduled.remove(throttled)
    fake.fail("patch", "nodes", 403, times=10)
    await run_until(cluster, state_is(cluster, "failed"), timeout=30)
    rem = await cluster.only_remediation()
    assert rem["crashes"] == 0 and rem["state_reason"].startswith("step "), rem["state_reason"]
    assert len(await redeliver(cluster, labels)) == 1
    assert not await redelivered(cluster)
    alerts = (await cluster.api.get("/api/v1/alerts")).json()
    assert sorted(a["state"] for a in alerts) == ["done", "repeat", "repeat"]


async def test_a_node_agent_that_cannot_be_reached_leaves_a_retries_0_step_waiting_not_failed(
    make_cluster: MakeCluster,
) -> None:
    """reset-gpu's `reset` step (retries: 0) against a node whose agent does not answer: the remediation waits
    for the node agent at once (no retries within the step), says so, and is neither failed nor escalated."""
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    for minute, pod in enumerate(["trainer-abc-1", "trainer-abc-2", "trainer-abc-1"]):
        labels = xid_labels("gpu-1", 13, exported_pod=pod, exported_namespace="ml")
        await cluster.post(am_payload(am_alert(labels, starts_at=f"2026-12-02T10:{minute:02d}:00Z")))
        await cluster.settle()
    rems = (await cluster.api.get("/api/v1/remediations")).json()
    reset = next(r for r in rems if r["playbook"] == "reset-gpu")
    assert reset["state"] == "running"
    assert reset["state_reason"].startswith("waiting: node agent unreachable since ")
    detail = (await cluster.api.get(f"/api/v1/remediations/{reset['id']}")).json()
    assert [(s["name"], s["status"]) for s in detail["steps"]][-1] == ("reset", "running")
    assert detail["crashes"] == 0 and not any(r["state"] == "failed" for r in rems)
