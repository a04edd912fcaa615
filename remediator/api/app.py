"""The FastAPI app factory. Everything the app needs comes from `Settings` or is injected by tests."""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
from collections.abc import AsyncIterator, Callable
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
    docs,
    fleet,
    guardrails,
    health,
    login,
    pause_ui,
    pauses,
    records,
    remediations,
    reports,
    silences,
    slack,
    storm_ui,
    ui,
    unacted,
)
from remediator.api.routes import storms as storm_routes
from remediator.api.sign_in_limit import SignInLimiter
from remediator.api.signin import SignIn
from remediator.api.templating import STATIC_DIR, set_docs_url
from remediator.engine.bootstrap import build_runtime, close_runtime
from remediator.engine.reload import DefinitionsReloader
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.engine.worker_process import WorkerProcess
from remediator.errors import IllegalTransition, SignInRequired, StoreUnavailable, WorkerProcessFailed
from remediator.process.gc_freeze import freeze_startup_objects
from remediator.settings import Settings, is_loopback
from remediator.validation_errors import invalid_request

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def create_app(
    settings: Settings,
    *,
    runtime: Runtime | None = None,
    run_worker: bool = True,
    listen_host: str = "127.0.0.1",
    on_worker_exit: Callable[[str], None] | None = None,
) -> FastAPI:
    """Build the app. With `runtime` given (tests), it is used as is and not disposed of.

    `listen_host` is the address the server binds: beyond loopback, every web UI page needs a signed-in
    person (`remediator serve` passes its `--host`). With REMEDIATOR_WORKER_PROCESS true the worker runs in a
    process of its own (engine/worker_process.py); `on_worker_exit` is called if it stops by itself. Unset
    (auto) is decided by `serve` (engine.startup.resolve_worker_process); an app built here without it runs
    the worker on its own event loop.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = None
        rt = runtime
        if rt is None:
            rt, engine = await build_runtime(settings)
        app.state.runtime = rt
        own_process = run_worker and runtime is None and settings.worker_process is True
        worker: Worker | WorkerProcess | None = None
        if own_process:
            await rt.repo.spool_webhooks()  # webhooks never wait for the worker process's transactions
            worker = WorkerProcess(rt, on_exit=on_worker_exit)
        elif run_worker:
            worker = Worker(rt)
        app.state.worker = worker
        reloader = DefinitionsReloader(rt)
        app.state.reloader = reloader
        await reloader.start(watch=run_worker)
        hangup = _on_sighup(reloader, worker if isinstance(worker, WorkerProcess) else None) if run_worker else False
        if isinstance(worker, WorkerProcess):
            try:
                await worker.start()
            except WorkerProcessFailed as exc:  # its own lines say why; serve stops with one line and exit 8
                if on_worker_exit is None:
                    raise
                on_worker_exit(str(exc))
        elif worker is not None:
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
                await close_runtime(rt, engine)

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
    app.include_router(silences.router)
    app.include_router(pauses.router)
    app.include_router(storm_routes.router)
    _add_ui(app, settings, listen_host)
    app.add_middleware(alerts.WebhookFastPath)
    # Every body is bounded while it streams in, before routing, parsing and authentication.
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, per_path={"/slack/interactions": slack.MAX_BODY})
    return app


def _on_sighup(reloader: DefinitionsReloader, worker_process: WorkerProcess | None = None) -> bool:
    """SIGHUP reloads the definitions (where the platform has it and this is the main thread), in the worker
    process too."""

    def hangup() -> None:
        reloader.request("sighup")
        if worker_process is not None:
            worker_process.reload()

    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, hangup)
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
    set_docs_url(settings.docs_url)
    app.include_router(docs.router)
    app.include_router(unacted.router)
    app.include_router(silences.ui_router)
    app.include_router(pause_ui.router)
    app.include_router(storm_ui.router)
    app.include_router(storm_ui.link_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


def _add_sign_in(app: FastAPI, settings: Settings, listen_host: str, fallback_key: bytes) -> None:
    """Who may use the web UI: a signed-in person beyond loopback (or when required), anyone on loopback."""
    required = settings.ui_sign_in == "required" or not is_loopback(listen_host)
    sign_in = SignIn(settings, required=required, fallback_key=fallback_key)
    app.state.sign_in = sign_in
    app.state.sign_in_limiter = SignInLimiter(settings)
    if required and not sign_in.possible:
        log.warning(
            "the web UI is closed to everyone: set REMEDIATOR_UI_TOKENS or REMEDIATOR_APPROVER_HEADER to sign "
            "in (approval links, Slack and the API keep working)"
        )
    if settings.approver_header and not settings.trusted_proxies:
        log.warning(
            "REMEDIATOR_APPROVER_HEADER is ignored: REMEDIATOR_TRUSTED_PROXIES is empty, so no peer may name "
            "the approver (set it to your sign-in proxy's addresses)"
        )
    if not settings.session_secret and not settings.secret_key and sign_in.token_login:
        log.info("REMEDIATOR_SESSION_SECRET is not set: UI sessions end when this process does")

    @app.exception_handler(SignInRequired)
    async def _sign_in_first(_request: Request, exc: SignInRequired) -> RedirectResponse:
        return RedirectResponse(f"/login?next={quote(exc.path, safe='/')}", status_code=303)
