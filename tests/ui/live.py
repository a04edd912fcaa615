"""A controller served by uvicorn on 127.0.0.1 in the test's event loop, for browser tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from remediator.adapters.kube import KubeAdapter
from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.runtime import Runtime
from remediator.settings import Settings
from tests.serving import loopback_socket, uvicorn_on

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
    sock, base = loopback_socket()
    settings = settings_for_base(base)
    rt, engine = await build_runtime(settings, kube=kube, connect_kube=False)
    app = create_app(settings, runtime=rt, listen_host=listen_host)
    serving = uvicorn_on(app, sock, lifespan="on")
    try:
        async with serving:
            yield base, rt
    finally:
        assert rt.notifier is not None
        await rt.notifier.aclose()
        await rt.repo.close()
        await engine.dispose()
        sock.close()
