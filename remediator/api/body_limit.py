"""One request-body size limit for every route, enforced while the body streams in, before any route runs.

A route that authenticates first and reads its body later still lets an unauthenticated client make the
process buffer whatever it sends (FastAPI reads form and JSON bodies before dependencies run). This ASGI
middleware sits in front of the whole app:

- a `Content-Length` above the limit is answered 413 at once, without reading a byte of the body;
- a body without a length (chunked) is read here, counted chunk by chunk, and cut off with 413 as soon as it
  passes the limit; a body within the limit is handed to the app as it was received.

So no route, authentication included, ever sees more than the limit, and the process never holds more than
the limit of one request's body. Routes may have a smaller limit of their own (`per_path`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from remediator.errors import BodyTooLarge

__all__ = ["BodyLimit", "read_body"]


class BodyLimit:
    """ASGI middleware: 413 for any HTTP request body larger than `limit` (or the path's own smaller limit)."""

    def __init__(self, app: ASGIApp, *, limit: int, per_path: Mapping[str, int] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.per_path = {path: min(value, limit) for path, value in (per_path or {}).items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.per_path.get(scope.get("path", ""), self.limit)
        length = _content_length(scope)
        if length is not None:
            if length > limit:
                await _too_large(send, limit)
                return
            await self.app(scope, receive, send)  # the server delivers exactly Content-Length bytes
            return
        if scope.get("method") in ("GET", "HEAD", "OPTIONS") and not _chunked(scope):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                messages.append(message)  # a disconnect: let the app see it
                break
            size += len(message.get("body", b""))
            if size > limit:
                await _too_large(send, limit)
                return
            messages.append(message)
            if not message.get("more_body", False):
                break
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        replay: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
        if messages and messages[-1]["type"] != "http.request":
            replay = [messages[-1]]

        async def buffered() -> Message:
            if replay:
                return replay.pop(0)
            return await receive()

        await self.app(scope, buffered, send)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def _chunked(scope: Scope) -> bool:
    value = _header(scope, b"transfer-encoding")
    return value is not None and b"chunked" in value.lower()


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"error": f"body larger than {limit} bytes"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, read chunk by chunk; raises BodyTooLarge past `limit` bytes (a route's own limit)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)
