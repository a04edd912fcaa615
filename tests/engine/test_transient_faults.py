"""A throttling, failing or vanished Kubernetes API is waited out, not failed: real HTTP, injected faults.

The controller drives the shipped Xid 79 playbook (taint, cordon, drain, condition, mark, event) against the
strict fake API server through the official client while the server answers 429 with Retry-After, 500, or
refuses connections (tests/fakekube/faults.py). Each run ends `succeeded`, evicts each GPU pod once, and
never sends a request again sooner than the Retry-After its last answer carried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from remediator.retrying import WAITING_PREFIX
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.fakekube.server import Call, FakeKube
from tests.helpers import am_alert, am_payload, xid_labels

GPU_PODS = {"trainer-abc-1", "trainer-abc-2"}
FORWARD = ["taint", "cordon", "drain", "condition", "mark", "event"]


async def run_until(cluster: Cluster, done: Callable[[], Awaitable[bool]], *, timeout: float) -> None:
    """Run worker iterations (and the drives they start) until `done()` holds."""
    async with asyncio.timeout(timeout):
        while not await done():
            await cluster.worker.run_once()
            running = [t for t in cluster.worker._running.values() if not t.done()]
            if running:
                await asyncio.wait(running, timeout=0.5)
            else:
                await asyncio.sleep(0.05)


def state_is(cluster: Cluster, *states: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        rems = (await cluster.api.get("/api/v1/remediations")).json()
        return bool(rems) and all(r["state"] in states for r in rems)
    return check


def evictions_accepted(fake: FakeKube) -> dict[str, int]:
    counts: dict[str, int] = {}
    for call in fake.requests("evict"):
        if call.ok:
            counts[str(call.name)] = counts.get(str(call.name), 0) + 1
    return counts


def too_soon(fake: FakeKube) -> list[tuple[Call, Call, float]]:
    """Requests sent again (same method and path) sooner than the Retry-After of the 429 before them."""
    found: list[tuple[Call, Call, float]] = []
    last: dict[tuple[str, str], Call] = {}
    for call in fake.calls:
        key = (call.method, call.path)
        before = last.get(key)
        if before is not None and before.status == 429 and before.injected:
            waited = call.at - before.at
            if waited < RETRY_AFTER - 0.05:
                found.append((before, call, waited))
        last[key] = call
    return found


RETRY_AFTER = 3


async def assert_succeeded_once(cluster: Cluster) -> dict[str, Any]:
    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded", (rem["state"], rem["state_reason"])
    forward = [(s["name"], s["status"]) for s in rem["steps"] if s["phase"] == "forward"]
    assert forward == [(name, "succeeded") for name in FORWARD]
    assert evictions_accepted(cluster.fake) == dict.fromkeys(GPU_PODS, 1)
    assert rem["crashes"] == 0
    return rem


@pytest.mark.timeout(150)
async def test_a_35s_window_of_429_from_the_alert_is_waited_out(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    fake = cluster.fake
    gpu_node(fake)
    fault = fake.faults.add(429, duration=35, retry_after=RETRY_AFTER)
    started = time.monotonic()
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await run_until(cluster, state_is(cluster, "succeeded", "failed"), timeout=120)
    rem = await assert_succeeded_once(cluster)
    assert fault.fired > 0 and time.monotonic() - started >= 35
    assert too_soon(fake) == []
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    assert not [e for e in audit if e["kind"] == "remediation.crashed"]


@pytest.mark.timeout(120)
async def test_a_15s_window_of_429_right_after_the_taint_is_waited_out(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    fake = cluster.fake
    gpu_node(fake)
    windows: list[Any] = []

    def after_taint(call: Call) -> None:  # the fault starts with the first answer after the taint's patch
        windows.append(fake.faults.add(429, after=0.01, duration=15, retry_after=RETRY_AFTER))

    fake.before("patch", "nodes", after_taint, times=1)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await run_until(cluster, state_is(cluster, "succeeded", "failed"), timeout=100)
    await assert_succeeded_once(cluster)
    assert windows and windows[0].fired > 0
    assert too_soon(fake) == []


@pytest.mark.timeout(150)
async def test_random_429_and_500_throughout_end_succeeded(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    fake = cluster.fake
    gpu_node(fake)
    fake.faults.add(429, probability=0.3, retry_after=RETRY_AFTER)
    fake.faults.add(500, probability=0.1 / 0.7)  # 10% of all requests: of those the 429s left through
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await run_until(cluster, state_is(cluster, "succeeded", "failed"), timeout=130)
    await assert_succeeded_once(cluster)
    injected = [c.status for c in fake.calls if c.injected]
    assert 429 in injected and 500 in injected
    assert too_soon(fake) == []


@pytest.mark.timeout(150)
async def test_a_45s_outage_mid_drain_finishes_within_10s_of_the_api_returning(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    fake = cluster.fake
    gpu_node(fake)
    back: list[float] = []
    outages: list[asyncio.Task[None]] = []

    async def outage() -> None:
        await asyncio.sleep(0.1)  # let the first eviction be answered
        await fake.outage(45)
        back.append(time.monotonic())

    fake.before("evict", "pods", lambda call: outages.append(asyncio.ensure_future(outage())), times=1)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))

    async def waiting_then_done() -> bool:
        return bool(back) and await state_is(cluster, "succeeded", "failed")()

    await run_until(cluster, waiting_then_done, timeout=130)
    took = time.monotonic() - back[0]
    await assert_succeeded_once(cluster)
    assert took <= 10, f"finished {took:.1f}s after the API returned"


async def test_a_step_whose_budget_runs_out_waits_and_is_retried_later(make_cluster: MakeCluster) -> None:
    """Budget 2 s, the API throttles for 6 s after the taint: the remediation waits (state reason names the
    dependency and since when, the gauge counts it), then goes on from the same step: never failed."""
    cluster: Cluster = await make_cluster(transient_budget_s=2, dependency_recheck_s=1)
    fake = cluster.fake
    gpu_node(fake)
    fake.before("patch", "nodes", lambda call: fake.faults.add(429, after=0.01, duration=6, retry_after=1),
                times=1)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))

    async def waiting() -> bool:
        rems = (await cluster.api.get("/api/v1/remediations")).json()
        return bool(rems) and (rems[0]["state_reason"] or "").startswith(WAITING_PREFIX)

    await run_until(cluster, waiting, timeout=30)
    rem = await cluster.only_remediation()
    assert rem["state"] == "running"
    assert rem["state_reason"].startswith("waiting: kubernetes API answering 429 since ")
    assert rem["state_reason"].endswith("Z")
    await cluster.worker._refresh_gauges()
    metrics = (await cluster.api.get("/metrics")).text
    assert 'remediator_remediations_waiting{dependency="kubernetes API"} 1.0' in metrics
    for path in ("/", "/fleet"):  # the remediations list and the fleet page say what it waits for
        page = (await cluster.api.get(path)).text
        assert "waiting: kubernetes API answering 429" in page, path
    node = fake.node("gpu-1")
    assert node is not None and not node["spec"].get("unschedulable")  # tainted, the cordon waits

    await run_until(cluster, state_is(cluster, "succeeded", "failed"), timeout=60)
    rem = await assert_succeeded_once(cluster)
    assert rem["state_reason"] != "" and not rem["state_reason"].startswith(WAITING_PREFIX)
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    kinds = [e["kind"] for e in audit]
    assert kinds.count("remediation.waiting") == 1 and "remediation.resumed" in kinds
    assert "remediation.crashed" not in kinds and "state.failed" not in kinds
