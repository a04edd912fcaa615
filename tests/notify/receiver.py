"""A real HTTP receiver on 127.0.0.1 for webhook tests: records JSON bodies, can fail on purpose.

`script` answers the first requests with the given status (and Retry-After, when not None), in order;
`times` is when each request arrived and `answered` when each scripted failure was answered (loop time).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Receiver:
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    fail_first: int = 0
    fail_status: int = 500
    always_fail: bool = False
    script: list[tuple[int, float | str | None]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        self.times.append(loop.time())
        self.attempts += 1
        raw = await request.read()
        if self.script:
            status, retry_after = self.script.pop(0)
            headers = {}
            if retry_after is not None:
                headers["Retry-After"] = retry_after if isinstance(retry_after, str) else f"{retry_after:g}"
            self.answered.append(loop.time())
            self.arrived.set()
            return web.Response(status=status, text="scripted failure", headers=headers)
        if self.always_fail or self.attempts <= self.fail_first:
            return web.Response(status=self.fail_status, text="try again")
        self.bodies.append(json.loads(raw))
        self.arrived.set()
        return web.Response(text="ok")

    async def wait_for(self, count: int, limit: float = 20.0) -> None:
        async with asyncio.timeout(limit):
            while len(self.bodies) < count:
                self.arrived.clear()
                await self.arrived.wait()


@asynccontextmanager
async def receiver(**behaviour: Any) -> AsyncIterator[Receiver]:
    rec = Receiver(**behaviour)
    app = web.Application()
    app.router.add_post("/{tail:.*}", rec.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rec.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield rec
    finally:
        await runner.cleanup()
