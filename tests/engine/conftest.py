"""A controller runtime wired to the strict fake API server, with fast drain polling for tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from remediator.actions.base import ActionContext, ActionResult
from remediator.actions.drain import Drain
from remediator.actions.validation import ValidateGpu
from remediator.adapters.kube import KubeAdapter
from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.settings import Settings
from tests.fakekube.server import FakeKube


@dataclass
class Cluster:
    rt: Runtime
    engine: AsyncEngine
    worker: Worker
    api: httpx.AsyncClient
    fake: FakeKube
    settings: Settings

    async def post(self, payload: dict[str, Any]) -> httpx.Response:
        r = await self.api.post("/api/v1/alerts", json=payload)
        assert r.status_code == 200, r.text
        return r

    async def settle(self, timeout: float = 30.0) -> None:
        await self.worker.drain_idle(timeout)

    async def only_remediation(self) -> dict[str, Any]:
        rems = (await self.api.get("/api/v1/remediations")).json()
        assert len(rems) == 1, rems
        detail: dict[str, Any] = (await self.api.get(f"/api/v1/remediations/{rems[0]['id']}")).json()
        return detail


def fast_drain(rt: Runtime) -> None:
    assert isinstance(rt.actions, dict)
    rt.actions["drain"] = Drain(poll_interval=0.05, backoff_initial=0.05, backoff_max=0.2)


class PassingGate(ValidateGpu):
    """validate_gpu for engine tests that have no node sidecar: every GPU passes. The real gate, against a
    real sidecar on fake NVML, is tested in tests/gpu_e2e and tests/sidecar."""

    async def run(self, ctx: ActionContext, params: Any) -> ActionResult:
        return ActionResult(changed=False, message="validated (engine test stand-in)",
                            output={"verdict": "pass", "failed": {}, "gpus": []})


def passing_gates(rt: Runtime) -> None:
    assert isinstance(rt.actions, dict)
    rt.actions["validate_gpu"] = PassingGate()


MakeCluster = Callable[..., Any]


@pytest.fixture
async def make_cluster(
    tmp_path: Path, fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> AsyncIterator[Callable[..., Any]]:
    made: list[Cluster] = []

    async def make(*, real_gates: bool = False, **overrides: Any) -> Cluster:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
            worker_poll_interval=0.05,  # type: ignore[arg-type]
            **overrides,
        )
        rt, engine = await build_runtime(settings, kube=kube_adapter)
        fast_drain(rt)
        if not real_gates:
            passing_gates(rt)
        worker = Worker(rt)
        await worker.refresh_inventory()
        app = create_app(settings, runtime=rt, run_worker=False)
        app.state.worker = worker
        api = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
        cluster = Cluster(rt, engine, worker, api, fake_kube, settings)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        await cluster.worker.stop()
        await cluster.api.aclose()
        await cluster.engine.dispose()
