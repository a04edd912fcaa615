"""The idle-GPU report: `GET /api/v1/reports/idle` (JSON, bearer token) and `GET /reports/idle` (UI page).

Per namespace: GPUs reclaimed from idle workloads, how many are still reclaimed, GPU-hours saved and the
GPU quota still lowered, all computed from the audit log (`remediator.engine.reports`). `since` and `until`
(ISO 8601) bound the window the GPU-hours are counted in; by default, all of history up to now.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import HTMLResponse, Response

from remediator.api.deps import Auth, RuntimeDep
from remediator.api.signin import require_sign_in
from remediator.api.templating import page
from remediator.engine.reports import idle_report

__all__ = ["api_router", "router"]

api_router = APIRouter(prefix="/api/v1/reports", dependencies=[Auth], tags=["reports"])
router = APIRouter(tags=["ui"], include_in_schema=False, dependencies=[Depends(require_sign_in)])

When = Annotated[str | None, Query(max_length=64, description="ISO 8601 time, e.g. 2026-12-01T00:00:00Z")]


def _time(value: str | None, name: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(
            422, f"{name}: not an ISO 8601 time: {value!r}"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _window(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    start, end = _time(since, "since"), _time(until, "until")
    if start is not None and end is not None and end < start:
        raise HTTPException(422, "until is before since")
    return start, end


@api_router.get("/idle")
async def idle_json(rt: RuntimeDep, since: When = None, until: When = None) -> dict[str, Any]:
    start, end = _window(since, until)
    report = await idle_report(rt.repo, now=rt.repo._clock(), since=start, until=end)
    return report.as_dict()


@router.get("/reports/idle", response_class=HTMLResponse)
async def idle_page(rt: RuntimeDep, since: When = None, until: When = None) -> Response:
    start, end = _window(since, until)
    report = await idle_report(rt.repo, now=rt.repo._clock(), since=start, until=end)
    return page("report_idle.html", {"report": report, "since": since or "", "until": until or "", "refresh": 0,
                                          "nav_here": "/reports/idle"})
