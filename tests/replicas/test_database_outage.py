"""The controller rides out its database going away: it keeps running, answers 503 and resumes by itself.

PostgreSQL: two replicas on a private server of the test's own; under a flood of webhooks the postmaster is
killed (SIGKILL) for 20 s and started again on the same data directory and port. Both processes keep
running, /readyz answers 503 with its reason meanwhile (not a refused connection), every webhook is
eventually answered 200 (the sender retries as Alertmanager does), each alert gets exactly one remediation,
and none is left `running`.

SQLite: the database file's write lock held by another connection for several seconds: /readyz answers 503
("locked") meanwhile, and everything resumes once the lock is let go.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from remediator.store.db import make_engine, make_sessionmaker
from remediator.store.models import Remediation
from tests.controller_process import ControllerProcess
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels
from tests.pgfixtures import PrivatePostgres

TOKEN = "outage-token"
OUTAGE_S = 20.0
pytestmark = pytest.mark.timeout(300)


async def wait_until(predicate: Callable[[], Any], timeout: float, what: str, detail: object = None) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not await predicate():
                await asyncio.sleep(0.3)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}: {detail}") from None


async def _rems(url: str) -> list[Remediation]:
    engine = make_engine(url)
    try:
        async with make_sessionmaker(engine)() as session:
            return list((await session.scalars(select(Remediation))).all())
    finally:
        await engine.dispose()


def _cluster(fake: FakeKube, nodes: int) -> list[str]:
    fake.add_namespace("ml")
    names = []
    for i in range(nodes):
        name = f"gpu-{i:03d}"
        fake.add_node(name, labels={"nvidia.com/gpu.present": "true"})
        fake.add_pod(f"job-{i:03d}", "ml", node=name, gpus=8)
        names.append(name)
    return names


def _env(url: str, kubeconfig: Path, **extra: str) -> dict[str, str]:
    return {
        "REMEDIATOR_DATABASE_URL": url, "REMEDIATOR_KUBECONFIG": str(kubeconfig),
        "REMEDIATOR_WEBHOOK_TOKEN": TOKEN, "REMEDIATOR_LEASE_DURATION": "3s",
        "REMEDIATOR_WORKER_POLL_INTERVAL": "100ms", "REMEDIATOR_QUARANTINE_RATE": "100000",
        "REMEDIATOR_MAX_QUARANTINED_NODES": "1000", "REMEDIATOR_KUBE_QPS": "500", **extra,
    }


class Sender:
    """Delivers webhooks as Alertmanager does: again after a 503 (its Retry-After) or a failed connection,
    until one is answered 200. Records every answer (0: no connection)."""

    def __init__(self, client: httpx.AsyncClient, urls: list[str]) -> None:
        self.client = client
        self.urls = urls
        self.answers: list[int] = []
        self.delivered = 0

    async def deliver(self, payload: dict[str, Any], first: int) -> None:
        attempt = first
        while True:
            url = self.urls[attempt % len(self.urls)]
            attempt += 1
            try:
                r = await self.client.post(f"{url}/api/v1/alerts", json=payload)
            except httpx.TransportError:
                self.answers.append(0)
                await asyncio.sleep(1)
                continue
            self.answers.append(r.status_code)
            if r.status_code == 200:
                self.delivered += 1
                return
            assert r.status_code == 503, (r.status_code, r.text)
            assert r.json()["reason"], r.text
            await asyncio.sleep(float(r.headers.get("Retry-After", "1")))


class Watch:
    """/readyz and /metrics of each controller, polled until stopped."""

    def __init__(self, client: httpx.AsyncClient, procs: Iterable[ControllerProcess]) -> None:
        self.client = client
        self.procs = list(procs)
        self.ready: dict[str, list[tuple[int, str]]] = {p.url: [] for p in self.procs}
        self.database_up: dict[str, list[str]] = {p.url: [] for p in self.procs}

    async def run(self) -> None:
        while True:
            for p in self.procs:
                try:
                    r = await self.client.get(f"{p.url}/readyz", timeout=5)
                    self.ready[p.url].append((r.status_code, r.json().get("reason", "")))
                    metrics = (await self.client.get(f"{p.url}/metrics", timeout=5)).text
                    self.database_up[p.url] += [
                        line.split()[-1] for line in metrics.splitlines() if line.startswith("remediator_database_up ")
                    ]
                except httpx.TransportError as exc:
                    self.ready[p.url].append((0, type(exc).__name__))
            await asyncio.sleep(0.5)


@pytest.mark.postgres
async def test_two_replicas_ride_out_postgres_killed_for_20_s_under_a_webhook_flood(tmp_path: Path) -> None:
    async with PrivatePostgres() as pg, FakeKube() as fake:
        nodes = _cluster(fake, 60)
        env = _env(pg.url, write_kubeconfig(tmp_path / "kubeconfig", fake.url),
                   REMEDIATOR_ALLOW_MULTIPLE_REPLICAS="true")
        procs = [ControllerProcess(tmp_path, env, name=f"replica-{i}") for i in range(2)]
        try:
            for p in procs:
                await p.start()
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
                sender = Sender(client, [p.url for p in procs])
                alerts = [am_alert(xid_labels(node, 79, uuid=f"GPU-{i:08d}")) for i, node in enumerate(nodes)]

                async def flood() -> None:
                    deliveries = []
                    for i, alert in enumerate(alerts):  # a steady flood across the outage: 60 over ~15 s
                        deliveries.append(asyncio.create_task(sender.deliver(am_payload(alert), i)))
                        await asyncio.sleep(0.25)
                    await asyncio.gather(*deliveries)

                flooding = asyncio.create_task(flood())
                await asyncio.sleep(3)  # some remediations are under way when the database goes
                assert sender.delivered > 0
                before = [len(sender.answers)]
                pg.kill()
                killed_at = time.monotonic()
                await asyncio.sleep(1.5)  # the killed server's backends are gone, the guards have noticed
                during = Watch(client, procs)
                watching = asyncio.create_task(during.run())
                await asyncio.sleep(OUTAGE_S - 1.5)
                watching.cancel()
                await pg.start()
                restarted_after = time.monotonic() - killed_at
                await asyncio.wait_for(flooding, 120)
                assert sender.delivered == len(alerts)

                async def settled() -> bool:
                    rems = await _rems(pg.url)
                    return len(rems) == len(alerts) and all(r.state == "succeeded" for r in rems)

                await wait_until(settled, 120, "a succeeded remediation for every alert",
                                 [(r.node, r.state) for r in await _rems(pg.url) if r.state != "succeeded"])
                assert sorted(r.node or "" for r in await _rems(pg.url)) == nodes  # exactly one per alert
                for p in procs:
                    assert (await client.get(f"{p.url}/readyz")).status_code == 200
            for p in procs:  # neither replica exited
                assert p.proc is not None and p.proc.poll() is None, p.output()[-3000:]
                assert "lost the single-replica guard" not in p.output()
                assert "Traceback" not in p.output(), p.output()[-3000:]
        finally:
            for p in procs:
                await p.stop()

    assert restarted_after >= OUTAGE_S
    assert 503 in sender.answers[before[0]:], "webhooks during the outage are answered 503"
    for url, seen in during.ready.items():
        statuses = {status for status, _ in seen}
        assert statuses == {503}, (url, seen)  # unready all along, and never a refused connection
        assert all(reason for _, reason in seen), seen
        assert "0.0" in during.database_up[url], during.database_up[url]


async def test_sqlite_file_locked_by_another_connection_answers_503_then_resumes(tmp_path: Path) -> None:
    database = tmp_path / "remediator.db"
    url = f"sqlite+aiosqlite:///{database}"
    async with FakeKube() as fake:
        nodes = _cluster(fake, 6)
        # One process: the webhooks go into the locked file itself (with the worker process, serve's default on
        # SQLite, they go to the intake spool beside it: tests/replicas/test_worker_process.py).
        ctl = ControllerProcess(tmp_path, _env(url, write_kubeconfig(tmp_path / "kubeconfig", fake.url),
                                               REMEDIATOR_WORKER_PROCESS="false"))
        try:
            await ctl.start()
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:
                sender = Sender(client, [ctl.url])
                await sender.deliver(am_payload(am_alert(xid_labels(nodes[0], 79, uuid="GPU-00000000"))), 0)

                locker = sqlite3.connect(database, timeout=30, isolation_level=None)
                locker.execute("BEGIN IMMEDIATE")  # the file's write lock, held by another connection
                try:
                    watch = Watch(client, [ctl])
                    watching = asyncio.create_task(watch.run())
                    during = [asyncio.create_task(sender.deliver(am_payload(am_alert(
                        xid_labels(node, 79, uuid=f"GPU-{i:08d}"))), 0)) for i, node in enumerate(nodes[1:], 1)]
                    await asyncio.sleep(6)
                    watching.cancel()
                    assert not any(d.done() for d in during)  # nothing could be stored meanwhile
                finally:
                    locker.execute("ROLLBACK")
                    locker.close()
                await asyncio.wait_for(asyncio.gather(*during), 60)

                async def settled() -> bool:
                    rems = await _rems(url)
                    return len(rems) == len(nodes) and all(r.state == "succeeded" for r in rems)

                await wait_until(settled, 60, "a succeeded remediation for every alert")
                assert (await client.get(f"{ctl.url}/readyz")).status_code == 200
            assert ctl.proc is not None and ctl.proc.poll() is None, ctl.output()[-3000:]
        finally:
            await ctl.stop()
    seen = watch.ready[ctl.url]
    assert seen and {status for status, _ in seen} == {503}, seen
    assert {reason for _, reason in seen} == {"locked"}, seen
