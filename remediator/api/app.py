"""The FastAPI app factory. Everything the app needs comes from `Settings` or is injected by tests."""

from __future__ import annotations

import asyncio
import gc
import logging
import secrets
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from remediator import __version__
from remediator.api.body_limit import BodyLimit
from remediator.api.csrf import Csrf
from remediator.api.routes import (
    alerts,
    approvals,
    audit,
    definitions,
    fleet,
    guardrails,
    health,
    login,
    records,
    remediations,
    reports,
    slack,
    ui,
    unacted,
)
from remediator.api.signin import SignIn, SignInRequired
from remediator.api.templating import STATIC_DIR
from remediator.engine.bootstrap import build_runtime
from remediator.engine.reload import DefinitionsReloader
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.errors import IllegalTransition, StoreUnavailable
from remediator.settings import Settings, is_loopback
from remediator.validation_errors import invalid_request

__all__ = ["create_app", "freeze_startup_objects"]

log = logging.getLogger(__name__)


def freeze_startup_objects() -> None:
    """Keep everything built so far out of the cyclic garbage collector, and collect young objects less often.

    What start-up builds (imported modules, definitions, ORM mappers, routes: ~170,000 objects) lives as long
    as the process. Left in the collector, every full collection walks all of it, a pause of 100-150 ms on a
    2-core VM that lands on whichever request is running; frozen, a full collection walks only what was made
    since. `remediator serve` calls this once the app has started; `bench/reads.py` calls it the same way.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def create_app(
    settings: Settings, *, runtime: Runtime | None = None, run_worker: bool = True, listen_host: str = "127.0.0.1"
) -> FastAPI:
    """Build the app. With `runtime` given (tests), it is used as is and not disposed of.

    `listen_host` is the address the server binds: beyond loopback, every web UI page needs a signed-in
    person (`remediator serve` passes its `--host`).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = None
        rt = runtime
        if rt is None:
            rt, engine = await build_runtime(settings)
        app.state.runtime = rt
        worker = Worker(rt) if run_worker else None
        app.state.worker = worker
        reloader = DefinitionsReloader(rt)
        app.state.reloader = reloader
        await reloader.start(watch=run_worker)
        hangup = _on_sighup(reloader) if run_worker else False
        if worker is not None:
            await worker.start()
        if runtime is None:
            freeze_startup_objects()
        try:
            yield
        finally:
            if hangup:
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            await reloader.stop()
            await rt.intake.close()
            if engine is not None:
                await rt.repo.close()
            if worker is not None:
                await worker.stop()
            if engine is not None:
                if rt.notifier is not None:
                    await rt.notifier.aclose()
                if rt.sidecar is not None:
                    await rt.sidecar.aclose()
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

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own answer echoes inputs; NaN/Infinity there would fail it with a 500.
        return JSONResponse(invalid_request(jsonable_encoder(exc.errors())), status_code=422)

    for module in (alerts, records, remediations, audit, guardrails, health, definitions):
        app.include_router(module.router)
    app.include_router(definitions.ui_router)
    app.include_router(reports.api_router)
    app.include_router(fleet.api_router)
    app.include_router(unacted.api_router)
    _add_ui(app, settings, listen_host)
    app.add_middleware(alerts.WebhookFastPath)
    # Every body is bounded while it streams in, before routing, parsing and authentication.
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, per_path={"/slack/interactions": slack.MAX_BODY})
    return app


def _on_sighup(reloader: DefinitionsReloader) -> bool:
    """SIGHUP reloads the definitions (where the platform has it and this is the main thread)."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reloader.request, "sighup")
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):
        return False
    return True


def _add_ui(app: FastAPI, settings: Settings, listen_host: str) -> None:
    """Approval pages, the web UI, Slack interactivity and their shared CSRF key and static files."""
    if settings.secret_key:
        key = settings.secret_key.encode()
    else:
        key = secrets.token_bytes(32)
        log.info("REMEDIATOR_SECRET_KEY is not set: form tokens use a per-process key (set it for replicas)")
    app.state.csrf = Csrf(key, secure_cookie=settings.public_url.startswith("https://"))
    _add_sign_in(app, settings, listen_host, key)
    app.include_router(approvals.api_router)
    for module in (approvals, ui, slack, reports, login):
        app.include_router(module.router)
    app.include_router(fleet.router)
    app.include_router(unacted.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


def _add_sign_in(app: FastAPI, settings: Settings, listen_host: str, fallback_key: bytes) -> None:
    """Who may use the web UI: a signed-in person beyond loopback (or when required), anyone on loopback."""
    required = settings.ui_sign_in == "required" or not is_loopback(listen_host)
    sign_in = SignIn(settings, required=required, fallback_key=fallback_key)
    app.state.sign_in = sign_in
    if required and not sign_in.possible:
        log.warning(
            "the web UI is closed to everyone: set REMEDIATOR_UI_TOKENS or REMEDIATOR_APPROVER_HEADER to sign "
            "in (approval links, Slack and the API keep working)"
        )
    if required and settings.approver_header and not settings.trusted_proxies:
        log.warning(
            "REMEDIATOR_APPROVER_HEADER is believed from any peer that reaches the controller: set "
            "REMEDIATOR_TRUSTED_PROXIES to your sign-in proxy and keep the NetworkPolicy in place"
        )
    if not settings.session_secret and not settings.secret_key and sign_in.token_login:
        log.info("REMEDIATOR_SESSION_SECRET is not set: UI sessions end when this process does")

    @app.exception_handler(SignInRequired)
    async def _sign_in_first(_request: Request, exc: SignInRequired) -> RedirectResponse:
        return RedirectResponse(f"/login?next={quote(exc.path, safe='/')}", status_code=303)
