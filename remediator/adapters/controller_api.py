"""HTTP client of a running controller's JSON API, for the operator commands (`remediator get|describe|...`).

Synchronous on purpose: each command makes a few requests and exits. Every failure leaves as one
`ControllerApiError` carrying the HTTP status (None: no answer at all) and the server's own message, so
the command line can turn it into an exit code and one line on stderr.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from remediator import __version__

__all__ = ["ControllerApi", "ControllerApiError"]


class ControllerApiError(Exception):
    """The controller said no (`status` is its HTTP status) or could not be reached (`status` is None)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _message(response: httpx.Response) -> str:
    """The server's reason: FastAPI's `detail`, the controller's `error`, or the start of the body."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("detail", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, list) and value:  # request validation: a list of problems
                first = value[0]
                if isinstance(first, dict):
                    where = ".".join(str(p) for p in first.get("loc") or [] if p not in ("query", "body"))
                    return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    text = response.text.strip().splitlines()
    return text[0][:200] if text else response.reason_phrase or "no reason given"


class ControllerApi:
    """`get`/`post` against `server` with the bearer `token`; JSON in, JSON out."""

    def __init__(
        self, server: str, token: str | None, *, timeout: float = 10.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.server = server.rstrip("/")
        headers = {"User-Agent": f"remediator-cli/{__version__}", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(
            base_url=self.server, headers=headers, timeout=timeout, transport=transport, follow_redirects=False
        )

    def __enter__(self) -> ControllerApi:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    @staticmethod
    def path(*parts: str) -> str:
        """An API path with each variable part escaped (an ID never changes which route is called)."""
        return "/api/v1/" + "/".join(quote(p, safe="") for p in parts)

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        return self._send("GET", path, params=query)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._send("POST", path, json=body)

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.InvalidURL as exc:
            raise ControllerApiError(None, f"invalid server address {self.server!r}: {exc}") from None
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise ControllerApiError(None, f"cannot reach the controller at {self.server}: {reason}") from None
        if response.is_redirect:
            # A redirect means this is not the API (e.g. a sign-in page in front of it): say so, never follow.
            where = response.headers.get("location", "?")
            raise ControllerApiError(response.status_code, f"{method} {path} was redirected to {where}")
        if not response.is_success:
            raise ControllerApiError(response.status_code, _message(response))
        try:
            return response.json()
        except ValueError:
            raise ControllerApiError(
                response.status_code, f"{method} {path}: the answer is not JSON (is {self.server} the controller?)"
            ) from None
