"""FastAPI dependencies as `Annotated` aliases, so routes declare what they need in one word."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

from remediator.engine.runtime import Runtime
from remediator.engine.worker import Wakes
from remediator.store.repository import Repository

__all__ = ["Auth", "RepoDep", "RuntimeDep", "WorkerDep", "check_bearer", "runtime_of"]


def runtime_of(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


# Dependencies are `async def` on purpose: FastAPI runs plain `def` dependencies in a thread pool,
# which costs more than the work they do.
async def get_runtime(request: Request) -> Runtime:
    return runtime_of(request)


async def get_repo(request: Request) -> Repository:
    return runtime_of(request).repo


async def get_worker(request: Request) -> Wakes | None:
    worker: Wakes | None = request.app.state.worker
    return worker


def check_bearer(header: str | None, tokens: list[str]) -> bool:
    """Constant-time comparison against every configured token (no tokens: allowed, loopback only)."""
    if not tokens:
        return True
    if not header or not header.startswith("Bearer "):
        return False
    given = header[len("Bearer "):].strip().encode()
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(given, token.encode())
    return ok


async def require_token(request: Request) -> None:
    rt = runtime_of(request)
    if not check_bearer(request.headers.get("authorization"), rt.settings.webhook_token):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"}
        )


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
RepoDep = Annotated[Repository, Depends(get_repo)]
WorkerDep = Annotated[Wakes | None, Depends(get_worker)]
Auth = Depends(require_token)
