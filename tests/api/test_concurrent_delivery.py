"""Two identical deliveries at once (an Alertmanager HA pair, or a retry racing the original): both are
answered 200 and exactly one remediation starts. A 503 is logged with its reason and counted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.settings import Settings
from tests.api.conftest import Controller
from tests.helpers import am_alert, am_payload, xid_labels

TOKEN = "pair-token"


async def _one_remediation_per_node(client: httpx.AsyncClient, nodes: list[str]) -> None:
    rems = (await client.get("/api/v1/remediations")).json()
    per_node: dict[str, int] = {}
    for r in rems:
        per_node[r["node"]] = per_node.get(r["node"], 0) + 1
    assert per_node == dict.fromkeys(nodes, 1)


async def test_sqlite_two_identical_deliveries_at_once_both_200_one_remediation(controller: Controller) -> None:
    nodes = [f"gpu-{i}" for i in range(10)]
    bodies = [am_payload(am_alert(xid_labels(n, 79))) for n in nodes]
    answers = await asyncio.gather(*(controller.client.post("/api/v1/alerts", json=b) for b in bodies for _ in (0, 1)))
    assert [a.status_code for a in answers] == [200] * 20
    assert sum(a.json()["repeats"] for a in answers) == 10
    await controller.worker.drain_idle()
    await _one_remediation_per_node(controller.client, nodes)


@pytest.fixture
async def pair(pg_url: str, tmp_path: Path) -> AsyncIterator[tuple[list[httpx.AsyncClient], list[Runtime]]]:
    settings = Settings(database_url=pg_url, webhook_token=[TOKEN])
    clients: list[httpx.AsyncClient] = []
    runtimes: list[Runtime] = []
    engines = []
    for _ in range(2):  # two replicas of the controller on one PostgreSQL database
        rt, engine = await build_runtime(settings, connect_kube=False)
        app = create_app(settings, runtime=rt, run_worker=False)
        app.state.worker = None
        clients.append(httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1",
                                         headers={"Authorization": f"Bearer {TOKEN}"}))
        runtimes.append(rt)
        engines.append(engine)
    yield clients, runtimes
    for client in clients:
        await client.aclose()
    for rt, engine in zip(runtimes, engines, strict=True):
        await rt.intake.close()
        await rt.repo.close()
        if rt.notifier is not None:
            await rt.notifier.aclose()
        await engine.dispose()


async def test_postgres_two_replicas_get_the_same_alerts_at_once(
    pair: tuple[list[httpx.AsyncClient], list[Runtime]],
) -> None:
    clients, runtimes = pair
    nodes = [f"gpu-{i}" for i in range(25)]
    bodies = [am_payload(am_alert(xid_labels(n, 79))) for n in nodes]
    answers = await asyncio.gather(*(c.post("/api/v1/alerts", json=b) for b in bodies for c in clients))
    assert [a.status_code for a in answers] == [200] * 50, [a.text for a in answers if a.status_code != 200]
    assert sum(a.json()["repeats"] for a in answers) == 25
    worker = Worker(runtimes[0])
    try:
        await worker.drain_idle()
    finally:
        await worker.stop()
    await _one_remediation_per_node(clients[0], nodes)


async def test_a_503_is_logged_with_its_reason_and_counted(
    controller: Controller, caplog: pytest.LogCaptureFixture
) -> None:
    from remediator.store.db import make_engine, make_sessionmaker
    from remediator.store.intake_writer import IntakeWriter
    from remediator.store.repository import Repository

    broken = make_engine("sqlite+aiosqlite:////nonexistent-dir/x.db")
    rt = controller.rt
    original_repo, original_intake = rt.repo, rt.intake
    rt.repo = Repository(make_sessionmaker(broken))
    rt.intake = IntakeWriter(rt.repo)
    try:
        with caplog.at_level(logging.WARNING, logger="remediator.api.routes.alerts"):
            r = await controller.client.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("n", 79))))
    finally:
        await rt.intake.close()
        await rt.repo.close()
        rt.repo, rt.intake = original_repo, original_intake
        await broken.dispose()
    assert r.status_code == 503
    logged = [rec.getMessage() for rec in caplog.records if "503" in rec.getMessage()]
    assert logged and "unreachable" in logged[0] and "unable to open database file" in logged[0]
    metrics = (await controller.client.get("/metrics")).text
    assert 'remediator_webhook_unavailable_total{reason="unreachable"} 1.0' in metrics
