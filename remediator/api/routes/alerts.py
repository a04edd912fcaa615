"""POST /api/v1/alerts: the Alertmanager webhook. 200 only after the batch is durably committed."""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from remediator.api.body_limit import BodyTooLarge, read_body
from remediator.api.deps import check_bearer
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.errors import StoreUnavailable
from remediator.intake.models import AlertmanagerPayload

__all__ = ["router", "unavailable_reason"]

log = logging.getLogger(__name__)
router = APIRouter()


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The payload's JSON schema with `$defs` references inlined (the model is not recursive)."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result: dict[str, Any] = walk(schema)
    return result


_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _inline_refs(AlertmanagerPayload.model_json_schema(by_alias=True))}},
    }
}


def unavailable_reason(exc: StoreUnavailable) -> str:
    """A short, bounded label for why the store refused a webhook (the metric's `reason`)."""
    text = str(exc).lower()
    for needle, reason in (
        ("locked", "locked"),
        ("timeout", "timeout"),
        ("timed out", "timeout"),
        ("unable to open", "unreachable"),
        ("connect", "unreachable"),
        ("concurrent", "conflict"),
    ):
        if needle in text:
            return reason
    return "database_error"


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _invalid(exc: ValidationError) -> JSONResponse:
    errors = [
        {"field": _field(tuple(e["loc"])), "message": e["msg"], "type": e["type"]} for e in exc.errors()[:20]
    ]
    first = errors[0]
    return JSONResponse(
        {"error": f"invalid payload: {first['field']}: {first['message']}", "errors": errors}, status_code=422
    )


@router.post(
    "/api/v1/alerts",
    responses={401: {}, 413: {}, 422: {}, 503: {}},
    summary="Alertmanager webhook receiver (version 4)",
    openapi_extra=_BODY,
)
async def receive_alerts(request: Request) -> Response:
    # No FastAPI dependencies on the hottest route: resolving them costs more than the lookups.
    started = time.perf_counter()
    rt: Runtime = request.app.state.runtime
    worker: Worker | None = request.app.state.worker
    response = await _handle(request, rt, worker)
    rt.metrics.webhook_duration.labels(code=str(response.status_code)).observe(time.perf_counter() - started)
    return response


async def _handle(request: Request, rt: Runtime, worker: Worker | None) -> Response:
    if not check_bearer(request.headers.get("authorization"), rt.settings.webhook_token):
        return JSONResponse(
            {"error": "missing or invalid bearer token"}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
        )
    try:
        body = await read_body(request, rt.settings.max_body_bytes)
    except BodyTooLarge:
        return JSONResponse({"error": f"body larger than {rt.settings.max_body_bytes} bytes"}, status_code=413)
    try:
        payload = AlertmanagerPayload.model_validate_json(body)
    except ValidationError as exc:
        return _invalid(exc)
    try:
        stored = await rt.intake.submit(payload)
    except StoreUnavailable as exc:
        reason = unavailable_reason(exc)
        log.warning("webhook answered 503 (%s): store unavailable: %s", reason, exc)
        rt.metrics.webhook_unavailable.labels(reason=reason).inc()
        return JSONResponse({"error": f"store unavailable: {exc}"}, status_code=503, headers={"Retry-After": "1"})
    for alert in payload.alerts:
        rt.metrics.alerts_received.labels(status=alert.status).inc()
    if stored.repeats:
        rt.metrics.alerts_repeated.inc(stored.repeats)
    if worker is not None:
        worker.wake()
    return JSONResponse(
        {"status": "stored", "batch_id": stored.batch_id, "alerts": stored.alerts, "repeats": stored.repeats}
    )
