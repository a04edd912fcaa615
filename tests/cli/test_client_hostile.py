"""The operator commands against a broken or hostile server on 127.0.0.1 (a raw asyncio socket server, so it
can do what no well-behaved HTTP server does): an answer without end, a trickle of bytes that would stretch a
per-read timeout forever, and error bodies that try to drive the terminal."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from remediator.cli.main import app

FULL_ID = "00000000-0000-4000-8000-000000000000"
MIB = 1024 * 1024
CAP = 64 * MIB  # the documented default
# What a terminal acts on: ESC, BEL, CR, backspace, DEL, the one-byte CSI (0x9b), a bidi override and isolate.
RAW = ("\x1b", "\x07", "\r", "\x08", "\x7f", "\x9b", "\u202e", "\u2066")
EVIL = "\x1b]0;pwned\x07\x1b[2J\rdecided\x08\x7f\x9b31m\u202eevil\u2066"
SHOWN = r"\x1b]0;pwned\x07\x1b[2J\rdecided\x08\x7f\x9b31m\u202eevil\u2066"


@dataclass
class Peer:
    """What the server saw: bytes of body it managed to send, and whether the client hung up before the end."""

    base: str = ""
    sent: int = 0
    hung_up: bool = False
    requests: list[bytes] = field(default_factory=list)


Behaviour = Callable[[asyncio.StreamWriter, Peer], Awaitable[None]]


@asynccontextmanager
async def hostile(behave: Behaviour) -> AsyncIterator[Peer]:
    peer = Peer()
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            peer.requests.append(head)
            for line in head.decode().split("\r\n"):
                if line.lower().startswith("content-length:"):
                    await reader.readexactly(int(line.split(":", 1)[1]))
            await behave(writer, peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            peer.hung_up = True
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    peer.base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield peer
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        for task in handlers:
            with suppress(asyncio.CancelledError):
                await task
        await server.wait_closed()


async def cli(peer: Peer, home: Path, *args: str, limit: float = 30, **env: str | None) -> tuple[Result, float]:
    """The real command line in a thread (this loop keeps serving); its result and how long it took."""
    environment = {"REMEDIATOR_SERVER": peer.base, "REMEDIATOR_TOKEN": "t", "REMEDIATOR_CONFIG_FILE": None,
                   "XDG_CONFIG_HOME": str(home), "REMEDIATOR_CLI_TIMEOUT": None, **env}
    started = time.monotonic()
    result = await asyncio.wait_for(
        asyncio.to_thread(lambda: CliRunner().invoke(app, list(args), env=environment)), limit
    )
    return result, time.monotonic() - started


def head(status: str = "200 OK", *extra: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", "Connection: close", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def endless(writer: asyncio.StreamWriter, peer: Peer, total: int) -> None:
    writer.write(head())
    chunk = b"a" * MIB
    while peer.sent < total:
        writer.write(chunk)
        await writer.drain()
        peer.sent += len(chunk)


@pytest.mark.timeout(120)
async def test_an_answer_past_64_mib_is_cut_off_unread_with_a_clear_error(tmp_path: Path) -> None:
    total = 128 * MIB
    async with hostile(lambda w, p: endless(w, p, total)) as peer:
        result, _ = await cli(peer, tmp_path, "get", "remediations", limit=90)
        await asyncio.sleep(0.2)
    assert result.exit_code == 4, result.output
    assert f"response from {peer.base}/api/v1/remediations?limit=100 exceeds {CAP} bytes" in result.stderr
    # It stopped reading: the server could not hand over the rest (at most the cap plus socket buffers went out).
    assert peer.hung_up and peer.sent < CAP + 32 * MIB, peer.sent


async def test_a_declared_length_past_the_cap_is_refused_before_reading(tmp_path: Path) -> None:
    async def declare(writer: asyncio.StreamWriter, peer: Peer) -> None:
        writer.write(head("200 OK", f"Content-Length: {100 * 1024 * MIB}") + b"[")
        await writer.drain()
        await asyncio.sleep(60)  # never sends the rest

    async with hostile(declare) as peer:
        result, took = await cli(peer, tmp_path, "get", "alerts")
    assert result.exit_code == 4, result.output
    assert f"exceeds {CAP} bytes" in result.stderr and took < 5


async def trickle_body(writer: asyncio.StreamWriter, peer: Peer) -> None:
    writer.write(head())
    while True:
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b" ")
        peer.sent += 1


async def trickle_head(writer: asyncio.StreamWriter, peer: Peer) -> None:
    for byte in head("200 OK", "X-Padding: " + "x" * 10_000):
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.2)
        peer.sent += 1


@pytest.mark.parametrize("trickle", [trickle_body, trickle_head], ids=["body", "headers"])
async def test_a_server_trickling_bytes_cannot_stretch_the_deadline(tmp_path: Path, trickle: Behaviour) -> None:
    async with hostile(trickle) as peer:
        result, took = await cli(peer, tmp_path, "get", "remediations", limit=20, REMEDIATOR_CLI_TIMEOUT="2")
    assert result.exit_code == 4, result.output
    assert f"no complete answer from {peer.base} within 2 s" in result.stderr
    assert peer.sent > 3  # it was answering, byte by byte, all along
    assert 1.9 < took < 4.5, took


@pytest.mark.timeout(60)
async def test_the_default_deadline_is_10_s_for_the_whole_command(tmp_path: Path) -> None:
    async with hostile(trickle_body) as peer:
        result, took = await cli(peer, tmp_path, "get", "approvals", limit=40)
    assert result.exit_code == 4 and "within 10 s" in result.stderr, result.output
    assert 9.9 < took < 13, took


async def test_a_bad_timeout_setting_is_a_usage_error(tmp_path: Path) -> None:
    async with hostile(trickle_body) as peer:
        for bad in ("0", "-1", "ten", "nan", "inf"):
            result, _ = await cli(peer, tmp_path, "get", "alerts", REMEDIATOR_CLI_TIMEOUT=bad)
            assert result.exit_code == 2, (bad, result.output)
            assert "REMEDIATOR_CLI_TIMEOUT" in result.stderr
    assert peer.requests == []


def answering(status: str, body: bytes) -> Behaviour:
    async def answer(writer: asyncio.StreamWriter, peer: Peer) -> None:
        writer.write(head(status, f"Content-Length: {len(body)}") + body)
        await writer.drain()

    return answer


@pytest.mark.parametrize(("status", "body", "code"), [
    ("409 Conflict", json.dumps({"detail": "already " + EVIL}).encode(), 1),
    # A text body is quoted up to its first line break; CR is one, so this one has none before its end.
    ("500 Internal Server Error", ("already " + EVIL.replace("\r", "\x1b[K") + "\nsecond line").encode(), 4),
], ids=["json-detail", "text-body"])
async def test_error_messages_from_the_server_are_printed_escaped(
    tmp_path: Path, status: str, body: bytes, code: int
) -> None:
    async with hostile(answering(status, body)) as peer:
        result, _ = await cli(peer, tmp_path, "approve", FULL_ID, "--by", "alice")
    assert result.exit_code == code, result.output
    (line,) = result.stderr.splitlines()
    shown = SHOWN if code == 1 else SHOWN.replace(r"\r", r"\x1b[K")
    assert line == f"error: {status.split()[0]}: already {shown}", line
    assert not any(c in result.stderr for c in RAW), ascii(result.stderr)
