"""Liveness, readiness (the store answers, the replica guard is held, the worker process runs) and Prometheus
metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from remediator.api.deps import RuntimeDep, WorkerDep
from remediator.engine.worker_process import WorkerProcess
from remediator.errors import StoreUnavailable
from remediator.observability import merge_expositions

__all__ = ["router"]

router = APIRouter(tags=["health"])
# How long /readyz waits for the database: under the deployed probe's timeoutSeconds (3), so that a database
# that does not answer (a locked SQLite file, a PostgreSQL that hangs) reads as 503 with its reason.
READY_TIMEOUT_S = 2.0


@router.get("/healthz")
async def healthz(rt: RuntimeDep) -> dict[str, object]:
    return {
        "status": "ok",
        "plan_only": rt.plan_only,
        "mode": "plan-only (no cluster changes)" if rt.plan_only else "active",
        "replica": rt.owner,
        "definitions_version": rt.definitions.current.version,
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
