"""The worker loop keeps a wake-up that arrives while an iteration is running, a busy loop sweeps overdue
approvals at most once every APPROVAL_SWEEP_S, not on every iteration, and the loop claims again at once only
when a claim came back full (otherwise at the next wake or poll); a webhook's wake claims without looking
first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from remediator.engine import worker as worker_module
from remediator.engine.worker import Worker
from remediator.store.models import AlertRow
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.definitions import note_alert
from tests.helpers import am_payload


async def loop_until(worker: Worker, run_once: Callable[..., Awaitable[bool]], done: asyncio.Event) -> None:
    """Run the worker's real loop over `run_once` until `done` is set (10 s at most), then stop it."""
    worker.run_once = run_once  # type: ignore[method-assign]
    await worker.start()
    try:
        await asyncio.wait_for(done.wait(), timeout=10)
    finally:
        await worker.stop()


async def test_wake_during_an_idle_iteration_runs_another_at_once(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    cluster.rt.settings = cluster.settings.model_copy(update={"worker_poll_interval": timedelta(seconds=60)})
    worker = Worker(cluster.rt)
    iterations = 0
    second = asyncio.Event()

    async def run_once(**_: object) -> bool:
        nonlocal iterations
        iterations += 1
        if iterations == 1:
            worker.wake()  # a webhook committed while this iteration found nothing to do
        else:
            second.set()
        return False

    await loop_until(worker, run_once, second)


async def test_a_busy_loop_sweeps_approvals_once_per_interval(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster()
    sweeps: list[bool] = []
    done = asyncio.Event()
    worker = Worker(cluster.rt)

    async def busy(*, sweep_approvals: bool = True) -> bool:
        sweeps.append(sweep_approvals)
        if len(sweeps) == 200:
            done.set()
        await asyncio.sleep(0)
        worker._full = True  # a claim took all it asked for: the loop goes round again at once
        return True

    monkeypatch.setattr(worker_module, "APPROVAL_SWEEP_S", 3600.0)
    await loop_until(worker, busy, done)
    assert sweeps[0] is True  # the first iteration sweeps
    assert sweeps[1:200].count(True) == 0  # then not again within the interval, however often the loop turns


async def test_work_that_left_nothing_behind_waits_for_a_wake_not_another_claim(make_cluster: MakeCluster) -> None:
    """An iteration that found work but took less than it asked for does not claim again at once (that empty
    claim would only run beside the drives it just started); the next wake (a webhook, a finished drive) does."""
    cluster: Cluster = await make_cluster()
    cluster.rt.settings = cluster.settings.model_copy(update={"worker_poll_interval": timedelta(seconds=60)})
    worker = Worker(cluster.rt)
    iterations = 0
    first, second = asyncio.Event(), asyncio.Event()

    async def run_once(**_: object) -> bool:
        nonlocal iterations
        iterations += 1
        (first if iterations == 1 else second).set()
        await asyncio.sleep(0)
        return True  # there was work, and no claim came back full

    worker.run_once = run_once  # type: ignore[method-assign]
    await worker.start()
    try:
        await asyncio.wait_for(first.wait(), timeout=10)
        for _ in range(50):
            await asyncio.sleep(0.01)
        assert iterations == 1
        assert not second.is_set()
        worker.wake()
        await asyncio.wait_for(second.wait(), timeout=10)
    finally:
        await worker.stop()


async def test_a_webhook_wakes_the_worker_to_claim_its_alerts_without_looking_first(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim after a webhook goes straight to its write (the webhook stored alerts); other claims look
    beside the writer first, so an idle poll never queues behind or blocks a writer."""
    cluster: Cluster = await make_cluster()
    looks: list[bool] = []
    real = cluster.rt.repo.claim_alerts

    async def claim(*args: Any, look_first: bool = True, **kwargs: Any) -> list[AlertRow]:
        looks.append(look_first)
        return await real(*args, look_first=look_first, **kwargs)

    monkeypatch.setattr(cluster.rt.repo, "claim_alerts", claim)
    await cluster.post(am_payload(note_alert("gpu-1", "hi")))
    await cluster.settle()
    assert looks[0] is False
    assert looks[1:] and all(looks[1:])
