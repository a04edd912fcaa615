"""The worker loop keeps a wake-up that arrives while an iteration is running, and a busy loop sweeps
overdue approvals at most once every APPROVAL_SWEEP_S, not on every iteration."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from remediator.engine import worker as worker_module
from remediator.engine.worker import Worker
from tests.engine.conftest import Cluster, MakeCluster


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

    async def busy(*, sweep_approvals: bool = True) -> bool:
        sweeps.append(sweep_approvals)
        if len(sweeps) == 200:
            done.set()
        await asyncio.sleep(0)
        return True  # there was work: the loop goes round again at once

    monkeypatch.setattr(worker_module, "APPROVAL_SWEEP_S", 3600.0)
    await loop_until(Worker(cluster.rt), busy, done)
    assert sweeps[0] is True  # the first iteration sweeps
    assert sweeps[1:200].count(True) == 0  # then not again within the interval, however often the loop turns
