"""The FastAPI app factory. Everything the app needs comes from `Settings` or is injected by tests."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from remediator import __version__
from remediator.api.routes import alerts, audit, guardrails, health, remediations
from remediator.engine.bootstrap import build_runtime
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.errors import IllegalTransition, StoreUnavailable
from remediator.settings import Settings

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def create_app(settings: Settings, *, runtime: Runtime | None = None, run_worker: bool = True) -> FastAPI:
    """Build the app. With `runtime` given (tests), it is used as is and not disposed of."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = None
        rt = runtime
        if rt is None:
            rt, engine = await build_runtime(settings)
        app.state.runtime = rt
        worker = Worker(rt) if run_worker else None
        app.state.worker = worker
        if worker is not None:
            await worker.start()
        try:
            yield
        finally:
            if worker is not None:
                await worker.stop()
            if engine is not None:
                if rt.kube is not None:
                    await rt.kube.close()
                await engine.dispose()

    app = FastAPI(
        title="gpu-remediator",
        version=__version__,
        description="Alertmanager webhook receiver and remediation API for GPU nodes.",
        lifespan=lifespan,
    )
    if runtime is not None:
        app.state.runtime = runtime
        app.state.worker = None

    @app.exception_handler(StoreUnavailable)
    async def _store_down(_request: Request, exc: StoreUnavailable) -> JSONResponse:
        return JSONResponse({"error": f"store unavailable: {exc}"}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(IllegalTransition)
    async def _illegal(_request: Request, exc: IllegalTransition) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=409)

    for module in (alerts, remediations, audit, guardrails, health):
        app.include_router(module.router)
    return app
