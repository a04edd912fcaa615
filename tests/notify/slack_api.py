"""A fake Slack Web API on 127.0.0.1: records chat.postMessage / chat.update calls and response_url posts.

Answers like Slack does (HTTP 200 with `ok`, `channel`, `ts`; `ok: false` with an error code), and can be
told to answer the next calls of a method with an error first (`ratelimited` comes as HTTP 429 with
Retry-After, as Slack sends it). `script` gives whole answers first (`Answer`: HTTP status, Slack's error
code, Retry-After); each call records when it arrived (`at`, loop time) and each scripted one when it was
answered (`answered`).
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
class Call:
    method: str
    body: dict[str, Any]
    auth: str
    at: float = 0.0


@dataclass(frozen=True)
class Answer:
    """A scripted answer: HTTP `status`, `ok: false` with `error` (None: no Slack body), `retry_after` header."""

    status: int = 200
    error: str | None = None
    retry_after: float | None = None


@dataclass
class FakeSlack:
    url: str = ""
    channel_id: str = "C0GPUOPS"
    calls: list[Call] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)  # bodies POSTed to /response/...
    errors: dict[str, list[str]] = field(default_factory=dict)  # method -> error codes to answer first
    script: dict[str, list[Answer]] = field(default_factory=dict)  # method -> answers to give first
    answered: list[float] = field(default_factory=list)  # when each scripted answer was given
    retry_after: int = 1
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)  # ts -> latest body
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _next: int = 0

    @property
    def response_url(self) -> str:
        return f"{self.url.removesuffix('/api')}/response/T0/123/abc"

    def of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        body = json.loads(await request.read())
        loop = asyncio.get_running_loop()
        self.calls.append(Call(method, body, request.headers.get("Authorization", ""), at=loop.time()))
        self.arrived.set()
        scripted = self.script.get(method)
        if scripted:
            answer = scripted.pop(0)
            headers = {} if answer.retry_after is None else {"Retry-After": f"{answer.retry_after:g}"}
            self.answered.append(loop.time())
            if answer.error is None:
                return web.Response(status=answer.status, text="scripted failure", headers=headers)
            return web.json_response({"ok": False, "error": answer.error}, status=answer.status, headers=headers)
        pending = self.errors.get(method)
        if pending:
            error = pending.pop(0)
            if error == "ratelimited":
                return web.json_response(
                    {"ok": False, "error": error}, status=429, headers={"Retry-After": str(self.retry_after)}
                )
            return web.json_response({"ok": False, "error": error})
        if method == "chat.postMessage":
            self._next += 1
            ts = f"1700000000.{self._next:06d}"
            self.messages[ts] = body
            return web.json_response({"ok": True, "channel": self.channel_id, "ts": ts})
        if method == "chat.update":
            if body.get("ts") not in self.messages or body.get("channel") != self.channel_id:
                return web.json_response({"ok": False, "error": "message_not_found"})
            self.messages[body["ts"]] = body
            return web.json_response({"ok": True, "channel": self.channel_id, "ts": body["ts"]})
        return web.json_response({"ok": False, "error": "unknown_method"})

    async def respond(self, request: web.Request) -> web.Response:
        self.responses.append(json.loads(await request.read()))
        self.arrived.set()
        return web.Response(text="ok")

    async def wait_until(self, check: Any, limit: float = 20.0) -> None:
        async with asyncio.timeout(limit):
            while not check():
                self.arrived.clear()
                await self.arrived.wait()


@asynccontextmanager
async def fake_slack(**behaviour: Any) -> AsyncIterator[FakeSlack]:
    slack = FakeSlack(**behaviour)
    app = web.Application()
    app.router.add_post("/api/{method}", slack.api)
    app.router.add_post("/response/{tail:.*}", slack.respond)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    slack.url = f"http://127.0.0.1:{port}/api"
    try:
        yield slack
    finally:
        await runner.cleanup()
