"""Why did nothing happen? `GET /alerts/ignored` (UI page) and `GET /api/v1/alerts/unacted` (JSON).

Lists the alerts that started no remediation, or whose remediation changed nothing, with the reason
(remediator.engine.unacted): no rule matched, no target, cooldown (with its end time), linked to an active
remediation, held by a guardrail, paused, node excluded, resolved first. Each alert can be downloaded as an
Alertmanager payload (`GET /alerts/{id}/payload.json`) to run through `remediator simulate`.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import HTMLResponse, Response
from pydantic import JsonValue

from remediator.api.deps import Auth, RuntimeDep
from remediator.api.query_check import KnownQuery
from remediator.api.signin import SignedIn, require_sign_in
from remediator.api.templating import SECURITY_HEADERS, page
from remediator.api.ui_facts import grafana_link, http_link, silence_link
from remediator.engine.runtime import Runtime
from remediator.engine.unacted import REASONS, Unacted, alertmanager_payload, unacted_alerts

__all__ = ["api_router", "router"]

api_router = APIRouter(prefix="/api/v1/alerts", dependencies=[Auth], tags=["alerts"])
router = APIRouter(tags=["ui"], include_in_schema=False, dependencies=[Depends(require_sign_in)])

Reason = Annotated[
    str | None, Query(max_length=32, description=f"only this reason: {', '.join(REASONS)}")
]
Limit = Annotated[int, Query(ge=1, le=1000)]


def _reason(reason: str | None) -> str | None:
    reason = reason or None
    if reason is not None and reason not in REASONS:
        raise HTTPException(422, f"unknown reason {reason!r} (one of {', '.join(REASONS)})")
    return reason


def _links(rt: Runtime, item: Unacted) -> dict[str, str | None]:
    return {
        "graph": http_link(item.generator_url),
        "silence": silence_link(rt.settings, item.labels, item.node),
        "grafana": grafana_link(rt.settings, item.node, item.gpu),
        "payload": f"/alerts/{item.alert_id}/payload.json",
    }


def simulate_command(item: Unacted) -> str:
    return f"remediator simulate alert-{item.alert_id}.json"


@api_router.get("/unacted", dependencies=[KnownQuery])
async def unacted_api(rt: RuntimeDep, reason: Reason = None, limit: Limit = 200) -> list[dict[str, JsonValue]]:
    """Alerts that started nothing (or whose remediation changed nothing), newest first, with the reason."""
    items = await unacted_alerts(rt, reason=_reason(reason), limit=limit)
    return [{**i.as_dict(), "links": {**_links(rt, i)}, "simulate": simulate_command(i)} for i in items]


@router.get("/alerts/ignored", response_class=HTMLResponse)
async def unacted_page(rt: RuntimeDep, who: SignedIn, reason: Reason = None) -> Response:
    chosen = reason if reason in REASONS else None
    items = await unacted_alerts(rt, reason=chosen, limit=200)
    return page("unacted.html", {
        "nav_here": "/alerts/ignored", "signed_in": who, "refresh": 0, "reasons": REASONS, "reason": chosen or "",
        "unknown_reason": bool(reason) and chosen is None,
        "items": [{"alert": i, "links": _links(rt, i), "simulate": simulate_command(i)} for i in items],
    })


@router.get("/alerts/{alert_id}/payload.json")
async def alert_payload(alert_id: int, rt: RuntimeDep) -> Response:
    """The stored alert as an Alertmanager webhook payload, downloaded for `remediator simulate`."""
    row = await rt.repo.get_alert(alert_id)
    if row is None:
        raise HTTPException(404, f"there is no alert {alert_id}")
    body = json.dumps(alertmanager_payload(row), indent=2, sort_keys=True) + "\n"
    headers = {**SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="alert-{alert_id}.json"'}
    return Response(body, media_type="application/json", headers=headers)
