"""POST /api/v1/alerts: the Alertmanager webhook. 200 only after the batch is durably committed."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from remediator.api.body_limit import read_body
from remediator.api.deps import check_bearer
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Wakes
from remediator.errors import BodyTooLarge, StoreUnavailable
from remediator.intake.models import AlertmanagerPayload

__all__ = ["WebhookFastPath", "answer", "router", "unavailable_reason"]

log = logging.getLogger(__name__)
router = APIRouter()


def _inline_refs(schema: JsonObject) -> JsonObject:
    """The payload's JSON schema with `$defs` references inlined (the model is not recursive)."""
    found = schema.pop("$defs", {})
    defs = found if isinstance(found, dict) else {}

    def walk(node: JsonValue) -> JsonValue:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result = walk(schema)
    return result if isinstance(result, dict) else {}


_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _inline_refs(AlertmanagerPayload.model_json_schema(by_alias=True))}},
    }
}


def unavailable_reason(exc: StoreUnavailable) -> str:
    """A short, bounded label for why the store refused a webhook (the metric's `reason`): the one the store
    classified the failure with (store/availability.py), else one read from the message."""
    if exc.reason:
        return exc.reason
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


Answer = tuple[int, JsonObject, dict[str, str]]
BodyReader = Callable[[int], Awaitable[bytes]]


def _invalid(exc: ValidationError) -> Answer:
    details = exc.errors()[:20]
    errors: list[JsonValue] = [
        {"field": _field(tuple(e["loc"])), "message": e["msg"], "type": e["type"]} for e in details
    ]
    first = details[0]
    return 422, {"error": f"invalid payload: {_field(tuple(first['loc']))}: {first['msg']}", "errors": errors}, {}


@router.post(
    "/api/v1/alerts",
    responses={401: {}, 413: {}, 422: {}, 503: {}},
    summary="Alertmanager webhook receiver (version 4)",
    openapi_extra=_BODY,
)
async def receive_alerts(request: Request) -> Response:
    # Documents the webhook; requests are answered by `WebhookFastPath` in front of the router, which gives
    # the same answers without Starlette's routing, request and response objects (this runs only without it).
    status, content, headers = await answer(
        request.app.state.runtime, request.app.state.worker, request.headers.get("authorization"),
        lambda limit: read_body(request, limit),
    )
    return JSONResponse(content, status_code=status, headers=headers)


async def answer(rt: Runtime, worker: Wakes | None, authorization: str | None, read: BodyReader) -> Answer:
    """Status, JSON body and extra headers for one webhook delivery, with its duration observed."""
    started = time.perf_counter()
    status, content, headers = await _handle(rt, worker, authorization, read)
    rt.metrics.webhook_duration.labels(code=str(status)).observe(time.perf_counter() - started)
    return status, content, headers


async def _handle(rt: Runtime, worker: Wakes | None, authorization: str | None, read: BodyReader) -> Answer:
    if not check_bearer(authorization, rt.settings.webhook_token):
        return 401, {"error": "missing or invalid bearer token"}, {"WWW-Authenticate": "Bearer"}
    try:
        body = await read(rt.settings.max_body_bytes)
    except BodyTooLarge:
        return 413, {"error": f"body larger than {rt.settings.max_body_bytes} bytes"}, {}
    try:
        payload = AlertmanagerPayload.model_validate_json(body)
    except ValidationError as exc:
        return _invalid(exc)
    try:
        stored = await rt.intake.submit(payload, body)
    except StoreUnavailable as exc:
        reason = unavailable_reason(exc)
        log.warning("webhook answered 503 (%s): store unavailable: %s", reason, exc)
        rt.metrics.webhook_unavailable.labels(reason=reason).inc()
        return 503, {"error": f"store unavailable: {exc}", "reason": reason}, {"Retry-After": "1"}
    for alert in payload.alerts:
        rt.metrics.alerts_received.labels(status=alert.status).inc()
    if stored.repeats:
        rt.metrics.alerts_repeated.inc(stored.repeats)
    if worker is not None:
        worker.wake(alerts=True)
    content: JsonObject = {
        "status": "stored", "batch_id": stored.batch_id, "alerts": stored.alerts, "repeats": stored.repeats,
    }
    return 200, content, {}


class WebhookFastPath:
    """ASGI middleware: `POST /api/v1/alerts` answered directly, everything else passed on.

    The webhook is the hottest route; Starlette's exception middleware, router, request object, FastAPI's
    endpoint wrapper and response class cost more per request than parsing the payload (see
    docs/PERFORMANCE.md). Installed inside `BodyLimit` and the server-error middleware, so the size limit
    and the 500 for an unexpected error are unchanged; the answers are those of `receive_alerts`.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/api/v1/alerts" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        authorization = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                authorization = value.decode("latin-1")
                break

        async def read(limit: int) -> bytes:
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    break  # the client went away: what arrived is parsed (and fails) like a short body
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            return b"".join(chunks)

        status, content, headers = await answer(state.runtime, state.worker, authorization, read)
        # The bytes JSONResponse would send.
        body = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()
        raw = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
        raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})
