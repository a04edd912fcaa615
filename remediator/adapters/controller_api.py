"""HTTP client of a running controller's JSON API, for the operator commands (`remediator get|describe|...`).

Synchronous to its callers: each command makes a few requests and exits. Underneath, one event loop per
client runs httpx's async client, so that one deadline covers the whole command (`timeout`, from the client's
creation): connecting, waiting for headers and reading bodies, however slowly a server trickles them, all
stop there. Answers are read in chunks and refused past `max_response` bytes, so a broken or hostile server
cannot make the command hold an unbounded body in memory. Every failure leaves as one `ControllerApiError`
carrying the HTTP status (None: no usable answer at all) and the server's own message, so the command line
can turn it into an exit code and one line on stderr; httpx's exceptions become it in one place,
`map_exceptions`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from remediator import __version__
from remediator.errors import ControllerApiError

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_RESPONSE_BYTES", "ControllerApi", "map_exceptions"]

DEFAULT_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_T = TypeVar("_T")


@contextmanager
def map_exceptions(server: str) -> Iterator[None]:
    """The one place this client maps httpx's exceptions onto remediator.errors (httpx's own
    `_transports/default.py` `map_exceptions` is the model): an address httpx cannot parse, or any failure to
    get an answer from `server` (refused, timed out, a broken protocol), is ControllerApiError without a status,
    keeping httpx's message (its class name when the message is empty). httpx's chained traceback is dropped:
    the command line prints one line."""
    try:
        yield
    except httpx.InvalidURL as exc:
        raise ControllerApiError(None, f"invalid server address {server!r}: {exc}") from None
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise ControllerApiError(None, f"cannot reach the controller at {server}: {reason}") from None


def _message(response: httpx.Response, body: bytes) -> str:
    """The server's reason: FastAPI's `detail`, the controller's `error`, or the start of the body."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        for key in ("detail", "error"):
            value = parsed.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, list) and value:  # request validation: a list of problems
                first = value[0]
                if isinstance(first, dict):
                    where = ".".join(str(p) for p in first.get("loc") or [] if p not in ("query", "body"))
                    return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    text = body.decode("utf-8", "replace").strip().splitlines()
    return text[0][:200] if text else response.reason_phrase or "no reason given"


class ControllerApi:
    """`get`/`post` against `server` with the bearer `token`; JSON in, JSON out.

    `timeout`: seconds for everything this client does, counted from its creation (one command's deadline).
    `max_response`: the most bytes of one answer it reads (after content decoding).
    """

    def __init__(
        self, server: str, token: str | None, *, timeout: float = DEFAULT_TIMEOUT_S,
        max_response: int = MAX_RESPONSE_BYTES, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.max_response = max_response
        self._deadline = time.monotonic() + timeout
        headers = {"User-Agent": f"remediator-cli/{__version__}", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._runner = asyncio.Runner()
        self._client = httpx.AsyncClient(
            base_url=self.server, headers=headers, timeout=timeout, transport=transport, follow_redirects=False
        )

    def __enter__(self) -> ControllerApi:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._runner.run(self._client.aclose())
        finally:
            self._runner.close()

    @staticmethod
    def path(*parts: str) -> str:
        """An API path with each variable part escaped (an ID never changes which route is called)."""
        return "/api/v1/" + "/".join(quote(p, safe="") for p in parts)

    def get(self, path: str, params: Mapping[str, object] | None = None) -> Any:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        return self._run(self._send("GET", path, params=query))

    def post(self, path: str, body: Mapping[str, object] | None = None) -> Any:
        return self._run(self._send("POST", path, json=body))

    def delete(self, path: str, params: Mapping[str, object] | None = None) -> Any:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        return self._run(self._send("DELETE", path, params=query))

    def _run(self, call: Coroutine[Any, Any, _T]) -> _T:
        """`call` on this client's loop, cut off at the deadline wherever it is (connect, headers, body)."""

        async def bounded() -> _T:
            remaining = self._deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    return await call
            except TimeoutError:
                raise ControllerApiError(
                    None, f"no complete answer from {self.server} within {self.timeout:g} s"
                ) from None

        try:
            return self._runner.run(bounded())
        finally:
            call.close()  # never awaited when the deadline had passed before it started

    async def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        with map_exceptions(self.server):
            async with self._client.stream(method, path, **kwargs) as response:
                if response.is_redirect:
                    # A redirect means this is not the API (e.g. a sign-in page in front of it): say so, never follow.
                    where = response.headers.get("location", "?")
                    raise ControllerApiError(response.status_code, f"{method} {path} was redirected to {where}")
                body = await self._body(response)
        if not response.is_success:
            raise ControllerApiError(response.status_code, _message(response, body))
        try:
            return json.loads(body)
        except ValueError:
            raise ControllerApiError(
                response.status_code, f"{method} {path}: the answer is not JSON (is {self.server} the controller?)"
            ) from None

    async def _body(self, response: httpx.Response) -> bytes:
        """The whole body, read chunk by chunk; past `max_response` bytes the connection is dropped unread."""
        too_big = ControllerApiError(None, f"response from {response.url} exceeds {self.max_response} bytes")
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_response:
            raise too_big
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_response:
                raise too_big
        return bytes(body)
