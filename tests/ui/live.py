"""A controller served by uvicorn on 127.0.0.1 in the test's event loop, for browser tests."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import uvicorn

from remediator.adapters.kube import KubeAdapter
from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.runtime import Runtime
from remediator.settings import Settings

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@asynccontextmanager
async def live_controller(
    settings_for_base: Callable[[str], Settings], kube: KubeAdapter | None = None, *, listen_host: str = "127.0.0.1"
) -> AsyncIterator[tuple[str, Runtime]]:
    """Yield (base URL, runtime); `settings_for_base(base)` builds the settings once the port is known.

    The server always binds 127.0.0.1; `listen_host` is what the app is told it binds (0.0.0.0: sign-in)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = settings_for_base(base)
    rt, engine = await build_runtime(settings, kube=kube, connect_kube=False)
    app = create_app(settings, runtime=rt, listen_host=listen_host)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(20):
            while not server.started:
                assert not task.done(), "uvicorn did not start"
                await asyncio.sleep(0.02)
        yield base, rt
    finally:
        server.should_exit = True
        await task
        assert rt.notifier is not None
        await rt.notifier.aclose()
        await rt.repo.close()
        await engine.dispose()
        sock.close()
