"""Liveness, readiness (the store answers) and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from remediator.api.deps import RuntimeDep
from remediator.errors import StoreUnavailable

__all__ = ["router"]

router = APIRouter(tags=["health"])


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
async def readyz(rt: RuntimeDep) -> Response:
    try:
        await rt.repo.ping()
    except StoreUnavailable as exc:
        return JSONResponse({"status": "store unavailable", "error": str(exc)}, status_code=503)
    return JSONResponse({"status": "ready"})


@router.get("/metrics")
async def metrics(rt: RuntimeDep) -> Response:
    return Response(generate_latest(rt.metrics.registry), media_type=CONTENT_TYPE_LATEST)
