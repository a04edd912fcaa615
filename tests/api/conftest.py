"""A controller app over a temporary SQLite store, driven in-process through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.settings import Settings

TOKEN = "s3cret-token"


@dataclass
class Controller:
    rt: Runtime
    engine: AsyncEngine
    client: httpx.AsyncClient
    worker: Worker
    settings: Settings


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[Controller]:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", webhook_token=[TOKEN, "second-token"],
        max_body_bytes=64 * 1024,
    )
    rt, engine = await build_runtime(settings, connect_kube=False)
    app = create_app(settings, runtime=rt, run_worker=False)
    worker = Worker(rt)
    app.state.worker = worker
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield Controller(rt, engine, client, worker, settings)
    await worker.stop()
    await engine.dispose()
