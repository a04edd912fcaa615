"""Baseline for bench/ingest.py: the same payload model parsed by a FastAPI endpoint that stores nothing."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from remediator.intake.models import AlertmanagerPayload

app = FastAPI()


@app.post("/api/v1/alerts")
async def alerts(request: Request) -> JSONResponse:
    payload = AlertmanagerPayload.model_validate_json(await request.body())
    return JSONResponse({"status": "parsed", "alerts": len(payload.alerts)})
