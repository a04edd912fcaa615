"""Request bodies are bounded while they stream, before routing and authentication, on a real uvicorn server.

The client is a raw socket that streams a chunked body far larger than the limit and stops as soon as an
answer arrives, so the tests see how much the server read before it answered.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import uvicorn
from fastapi import Request

from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.settings import Settings

LIMIT = 64 * 1024
TOTAL = 64 * 1024 * 1024
CHUNK = 64 * 1024


@dataclass
class Served:
    port: int
    probe_calls: list[int] = field(default_factory=list)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", webhook_token=["tok"], max_body_bytes=LIMIT,
        slack_signing_secret="slack-secret",
    )
    rt, engine = await build_runtime(settings, connect_kube=False)
    app = create_app(settings, runtime=rt, run_worker=False)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    result = Served(port=sock.getsockname()[1])

    @app.post("/probe")
    async def probe(request: Request) -> dict[str, int]:
        result.probe_calls.append(1)  # the route ran: the body reached application code
        return {"size": len(await request.body())}

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.02)
        yield result
    finally:
        server.should_exit = True
        await task
        if rt.notifier is not None:
            await rt.notifier.aclose()
        await rt.repo.close()
        await engine.dispose()
        sock.close()


async def _send(port: int, path: str, *, total: int, head: dict[str, str]) -> tuple[int, int]:
    """POST a chunked body of up to `total` bytes; stop sending once the server answers. (status, bytes sent)"""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in head.items())]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    answer = asyncio.create_task(reader.readline())
    data = b"a" * CHUNK
    sent = 0
    try:
        while sent < total and not answer.done():
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            sent += len(data)
            await writer.drain()
        if not answer.done():
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except ConnectionError:
        pass
    status_line = await asyncio.wait_for(answer, 30)
    writer.close()
    return int(status_line.split()[1]), sent


async def test_chunked_body_past_the_limit_is_cut_off_before_authentication(served: Served) -> None:
    status, sent = await _send(
        served.port, "/api/v1/remediations/x/approve", total=TOTAL,
        head={"Transfer-Encoding": "chunked", "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 413  # not 401: the body was refused before authentication
    assert sent < TOTAL // 4  # the server stopped reading near the limit


async def test_chunked_body_past_the_limit_never_reaches_the_route(served: Served) -> None:
    status, sent = await _send(served.port, "/probe", total=TOTAL, head={"Transfer-Encoding": "chunked"})
    assert status == 413
    assert sent < TOTAL // 4
    assert served.probe_calls == []


async def test_chunked_body_within_the_limit_reaches_the_route_whole(served: Served) -> None:
    status, sent = await _send(served.port, "/probe", total=LIMIT, head={"Transfer-Encoding": "chunked"})
    assert status == 200
    assert sent == LIMIT
    assert served.probe_calls == [1]


async def test_declared_length_past_the_limit_is_refused_at_once(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(
        f"POST /api/v1/alerts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {TOTAL}\r\n\r\n".encode()
    )
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 30)  # answered without sending a byte of body
    writer.close()
    assert status_line.split()[1] == b"413"
    assert served.probe_calls == []


async def test_slack_interactions_keep_their_smaller_limit(served: Served) -> None:
    status, sent = await _send(
        served.port, "/slack/interactions", total=TOTAL,
        head={"Transfer-Encoding": "chunked", "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 413
    assert sent < TOTAL // 4
