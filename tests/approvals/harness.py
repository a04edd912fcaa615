"""A plan-only controller over temporary SQLite with the test playbooks of tests/approvals/defs.

Notifications go to an in-process capturing channel (plus any real channel a test configures), so tests
can read the approval link the way a person would: from the message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from remediator.adapters.notifier import Channel, Message
from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.notifications import NotificationService
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.settings import Settings
from remediator.store.models import Remediation
from tests.helpers import am_alert, am_payload, xid_labels

DEFS = Path(__file__).resolve().parent / "defs"
TOKEN = "api-token"


class CaptureChannel:
    """A channel that keeps what it is given."""

    name = "capture"

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def send(self, message: Message) -> None:
        self.messages.append(message)

    def links(self) -> list[str]:
        return [b.url for m in self.messages for b in m.buttons if b.url and "/approvals/" in b.url]


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@dataclass
class Gated:
    rt: Runtime
    engine: AsyncEngine
    app: FastAPI
    client: httpx.AsyncClient
    worker: Worker
    settings: Settings
    capture: CaptureChannel
    clock: Clock

    async def fire(self, labels: dict[str, str] | None = None) -> Remediation:
        """Post one alert through the webhook and run the worker until nothing is left to do."""
        body = am_payload(am_alert(labels or xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml")))
        r = await self.client.post("/api/v1/alerts", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200, r.text
        await self.settle()
        rows = await self.rt.repo.list_remediations()
        assert rows, "no remediation was created"
        return rows[0]

    async def settle(self) -> None:
        await self.worker.drain_idle(timeout=30)
        assert self.rt.notifier is not None
        await self.rt.notifier.flush(10)

    async def link(self) -> str:
        await self.settle()
        links = self.capture.links()
        assert links, f"no approval link in {self.capture.messages!r}"
        return links[-1]

    async def token(self) -> str:
        return (await self.link()).rsplit("/", 1)[1]

    async def state(self, rem_id: str) -> str:
        rem = await self.rt.repo.get(rem_id)
        assert rem is not None
        return rem.state


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
        "rules_dir": DEFS / "rules",
        "playbooks_dir": DEFS / "playbooks",
        "webhook_token": [TOKEN],
        "dry_run": True,
        "public_url": "http://127.0.0.1:9",
        "secret_key": "test-secret-key",
        **overrides,
    }
    return Settings(**values)


@asynccontextmanager
async def gated_controller(
    tmp_path: Path, *, listen_host: str = "127.0.0.1", peer: str = "127.0.0.1", **overrides: Any
) -> AsyncIterator[Gated]:
    """`listen_host`: the bind address the app is told about (beyond loopback the UI needs sign-in);
    `peer`: the client address every request of `client` comes from."""
    settings = settings_for(tmp_path, **overrides)
    rt, engine = await build_runtime(settings, connect_kube=False)
    clock = Clock()
    rt.repo.clock = clock
    capture = CaptureChannel()
    configured = rt.notifier
    assert configured is not None
    real: list[Channel] = list(configured.channels)
    rt.notifier = NotificationService(
        [capture, *real], rt.repo, rt.metrics, settings, on_close=configured.aclose
    )
    app = create_app(settings, runtime=rt, run_worker=False, listen_host=listen_host)
    worker = Worker(rt)
    app.state.worker = worker
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9") as client:
            yield Gated(rt, engine, app, client, worker, settings, capture, clock)
    finally:
        await worker.stop()
        await rt.notifier.aclose()
        await engine.dispose()
