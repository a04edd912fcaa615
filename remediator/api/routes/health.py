"""Liveness, readiness (the store answers, the replica guard is held, the worker process runs) and Prometheus
metrics."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from remediator.api.deps import RuntimeDep, WorkerDep
from remediator.domain.json_values import JsonObject
from remediator.engine.worker_process import WorkerProcess
from remediator.errors import StoreUnavailable
from remediator.process.metrics import merge_expositions
from remediator.store.flag_store import PAUSE_FLAG

__all__ = ["router"]

router = APIRouter(tags=["health"])
# How long /readyz waits for the database: under the deployed probe's timeoutSeconds (3), so that a database
# that does not answer (a locked SQLite file, a PostgreSQL that hangs) reads as 503 with its reason.
READY_TIMEOUT_S = 2.0
PAUSES_TIMEOUT_S = 0.5  # /healthz reads the pauses at most this long


@router.get("/healthz")
async def healthz(rt: RuntimeDep) -> dict[str, object]:
    """Liveness, with the pauses holding now (who, why, scope, until). Liveness never depends on the database:
    when the pauses cannot be read within PAUSES_TIMEOUT_S, `pauses` is null and `pauses_error` says why."""
    pauses: list[JsonObject] | None = None
    error: str | None = None
    try:
        async with asyncio.timeout(PAUSES_TIMEOUT_S):
            flag = await rt.repo.get_flag(PAUSE_FLAG) or {}
            pauses = [{"id": "kill-switch", "created_by": flag.get("by"), "reason": flag.get("reason"),
                       "scope": {"all": True, "nodes": [], "selector": None, "playbooks": []}, "until": None,
                       "active": True}] if flag.get("paused") else []
            pauses += await rt.repo.list_pauses()
    except (TimeoutError, StoreUnavailable) as exc:
        pauses, error = None, f"store unavailable: {exc}" if str(exc) else "store unavailable"
    return {
        "status": "ok",
        "plan_only": rt.plan_only,
        "mode": "plan-only (no cluster changes)" if rt.plan_only else "active",
        "replica": rt.owner,
        "definitions_version": rt.definitions.current.version,
        "pauses": pauses,
        **({"pauses_error": error} if error else {}),
    }


@router.get("/readyz", responses={503: {}})
async def readyz(rt: RuntimeDep, worker: WorkerDep) -> Response:
    try:
        await rt.repo.check_ready(READY_TIMEOUT_S)
    except StoreUnavailable as exc:
        return JSONResponse({"status": "store unavailable", "reason": exc.reason or "database_error",
                             "error": str(exc)}, status_code=503)
    spool = await rt.repo.spool_problem()
    if spool is not None:
        return JSONResponse({"status": "intake spool unavailable", "reason": "intake_spool", "error": spool},
                            status_code=503)
    if isinstance(worker, WorkerProcess) and not worker.running:
        return JSONResponse({"status": "worker process not running"}, status_code=503)
    return JSONResponse({"status": "ready"})


@router.get("/metrics")
async def metrics(rt: RuntimeDep, worker: WorkerDep) -> Response:
    """This process's metrics; with a worker process, merged with the worker's (one controller, one scrape)."""
    text = generate_latest(rt.metrics.registry)
    if isinstance(worker, WorkerProcess):
        theirs = await worker.metrics_text()
        if theirs is not None:
            text = merge_expositions(text.decode(), theirs)
    return Response(text, media_type=CONTENT_TYPE_LATEST)
