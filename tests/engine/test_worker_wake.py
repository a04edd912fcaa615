"""The worker loop keeps a wake-up that arrives while an iteration is running."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from remediator.engine.worker import Worker
from tests.engine.conftest import Cluster, MakeCluster


async def test_wake_during_an_idle_iteration_runs_another_at_once(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    cluster.rt.settings = cluster.settings.model_copy(update={"worker_poll_interval": timedelta(seconds=60)})
    worker = Worker(cluster.rt)
    iterations = 0
    second = asyncio.Event()

    async def run_once() -> bool:
        nonlocal iterations
        iterations += 1
        if iterations == 1:
            worker.wake()  # a webhook committed while this iteration found nothing to do
        else:
            second.set()
        return False

    worker.run_once = run_once  # type: ignore[method-assign]
    await worker.start()
    try:
        await asyncio.wait_for(second.wait(), timeout=10)
    finally:
        await worker.stop()
