"""How a remediation ends when a call fails for good, and what a re-delivery of its alert does then.

A permanent error (422 Invalid for a pod name, 403) ends the remediation once with the API's message instead
of counting crashes; the cooldown is for remediations that ran, so an alert still firing after one that the
driver's crashes ended starts a new remediation, while one after a remediation that ran is held back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from remediator.store.models import Remediation
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.helpers import am_alert, am_payload, xid_labels


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


async def redeliver(cluster: Cluster, labels: dict[str, str]) -> str:
    """The alert again, still firing (a later startsAt: the same delivery again is a stored repeat)."""
    await cluster.post(am_payload(am_alert(labels, starts_at="2026-12-02T10:05:00Z")))
    await cluster.settle()
    alerts = (await cluster.api.get("/api/v1/alerts")).json()
    return str(alerts[0]["outcome"])


async def test_a_redelivery_after_a_remediation_ended_by_crashes_starts_a_new_one(
    make_cluster: MakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster(max_crashes=1)
    gpu_node(cluster.fake)
    real_forward = cluster.worker.executor._forward

    async def explode(rem: Remediation, **_: object) -> None:
        raise RuntimeError("the driver failed")

    monkeypatch.setattr(cluster.worker.executor, "_forward", explode)
    labels = xid_labels("gpu-1", 79)
    await cluster.post(am_payload(am_alert(labels, starts_at="2026-12-02T10:00:00Z")))
    await cluster.settle()
    first = await cluster.only_remediation()
    assert first["state"] == "failed" and first["crashes"] == 1

    monkeypatch.setattr(cluster.worker.executor, "_forward", real_forward)
    assert await redeliver(cluster, labels) == "started"  # the rule's 1h cooldown did not hold it back
    rems = (await cluster.api.get("/api/v1/remediations")).json()
    assert len(rems) == 2 and {r["state"] for r in rems} == {"failed", "succeeded"}


async def test_a_redelivery_after_a_remediation_that_ran_is_held_by_the_cooldown(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    labels = xid_labels("gpu-1", 79)
    await cluster.post(am_payload(am_alert(labels, starts_at="2026-12-02T10:00:00Z")))
    await cluster.settle()
    assert (await cluster.only_remediation())["state"] == "succeeded"
    assert await redeliver(cluster, labels) == "cooldown"


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
