"""A worker that dies mid-drain: another one resumes at the drain step and no pod is evicted twice."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.helpers import am_alert, am_payload, xid_labels


async def _wait_for(predicate: object, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.02)


async def test_crash_mid_drain_resumes_without_repeating_evictions(make_cluster: MakeCluster) -> None:
    first: Cluster = await make_cluster(lease_duration="1s")
    fake = first.fake
    gpu_node(fake)
    # One of the two GPU pods is protected by a PodDisruptionBudget: the drain evicts one and keeps retrying.
    fake.write("pods", "ml", "trainer-abc-2", {"metadata": {"labels": {"protected": "yes"}}})
    fake.add_pdb("hold", "ml", match_labels={"protected": "yes"}, min_available=1)

    await first.post(am_payload(am_alert(xid_labels("gpu-1", 79))))

    async def release_nothing(*_args: object, **_kw: object) -> None:
        return None  # a killed process releases nothing: its lease must expire

    first.rt.repo.release_lease = release_nothing  # type: ignore[method-assign]
    runner = asyncio.create_task(first.worker.drain_idle(60))
    await _wait_for(lambda: len(fake.evicted_uids()) == 1 and any(
        c.verb == "evict" and c.status == 429 for c in fake.calls))
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await runner
    await first.worker.stop()

    listed = await first.api.get("/api/v1/remediations")
    assert listed.status_code == 200, listed.text  # the stop cancelled a step mid-transaction: still readable
    rem = listed.json()[0]
    assert rem["state"] == "running" and rem["current_step"] == 2  # died inside the drain

    fake.remove("poddisruptionbudgets", "ml", "hold")
    second: Cluster = await make_cluster(lease_duration="1s")
    assert second.rt.owner != first.rt.owner
    real_clock = second.rt.repo.clock
    second.rt.repo.clock = lambda: real_clock() + timedelta(seconds=2)  # the dead worker's lease has expired
    await second.settle(60)

    evicted = fake.evicted_uids()
    assert len(evicted) == len(set(evicted)) == 2, evicted
    detail = (await second.api.get(f"/api/v1/remediations/{rem['id']}")).json()
    assert detail["state"] == "succeeded"
    drain = next(s for s in detail["steps"] if s["name"] == "drain")
    assert drain["attempts"] == 2 and drain["status"] == "succeeded"
    audit = (await second.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    resumed = [e for e in audit if e["kind"] == "step.started" and e["data"]["step"] == "drain"]
    assert [e["data"]["resumed"] for e in resumed] == [False, True]
