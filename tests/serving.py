"""An ASGI app served by uvicorn on a loopback port inside the test's event loop, so a CLI subprocess, a thread
or a browser can reach it over real HTTP; one copy of the start-and-wait and the shutdown for every such test."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import uvicorn


def loopback_socket() -> tuple[socket.socket, str]:
    """A socket bound to a free port on 127.0.0.1, and the base URL that reaches it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


@asynccontextmanager
async def uvicorn_on(app: Any, sock: socket.socket, *, lifespan: Literal["on", "off"]) -> AsyncIterator[None]:
    """Serve `app` on `sock` until the block ends; fail if uvicorn has not started within 20 s."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(20):
            while not server.started:
                assert not task.done(), "uvicorn did not start"
                await asyncio.sleep(0.02)
        yield
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def served_on_loopback(app: Any, *, lifespan: Literal["on", "off"] = "off") -> AsyncIterator[str]:
    """Serve `app` on a free loopback port; yield its base URL. lifespan="off" keeps a worker the test drives."""
    sock, base = loopback_socket()
    try:
        async with uvicorn_on(app, sock, lifespan=lifespan):
            yield base
    finally:
        sock.close()
