"""Reports, each as JSON under `/api/v1/reports/...` (bearer token) and as a UI page under `/reports/...`.

- idle: per namespace, GPUs reclaimed from idle workloads, how many are still reclaimed, GPU-hours saved and
  the GPU quota still lowered, all computed from the audit log (`remediator.engine.idle_report`). `since` and
  `until` (ISO 8601) bound the window the GPU-hours are counted in; by default, all of history up to now.
- effectiveness: what each remediation created in the last `since` (a duration, default 30d) achieved,
  judged with the recurrence window `window` (default 24h) (`remediator.engine.effectiveness`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from pydantic import JsonValue

from remediator.api.deps import Auth, RuntimeDep
from remediator.api.query_check import KnownQuery
from remediator.api.signin import require_sign_in
from remediator.api.templating import page
from remediator.domain.durations import parse_duration
from remediator.domain.timestamps import as_utc
from remediator.engine.effectiveness import EffectivenessReport
from remediator.engine.idle_report import effectiveness_report, idle_report

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
    return as_utc(parsed)


def _window(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    start, end = _time(since, "since"), _time(until, "until")
    if start is not None and end is not None and end < start:
        raise HTTPException(422, "until is before since")
    return start, end


@api_router.get("/idle", dependencies=[KnownQuery])
async def idle_json(rt: RuntimeDep, since: When = None, until: When = None) -> dict[str, JsonValue]:
    start, end = _window(since, until)
    report = await idle_report(rt.repo, now=rt.clock(), since=start, until=end)
    return report.as_dict()


@router.get("/reports/idle", response_class=HTMLResponse)
async def idle_page(rt: RuntimeDep, since: When = None, until: When = None) -> Response:
    start, end = _window(since, until)
    report = await idle_report(rt.repo, now=rt.clock(), since=start, until=end)
    return page("report_idle.html", {"report": report, "since": since or "", "until": until or "", "refresh": 0,
                                      "nav_here": "/reports/idle"})


DurationQuery = Annotated[str, Query(max_length=32, description="duration, e.g. 24h, 7d, 1h30m")]


def _duration(value: str, name: str) -> timedelta:
    """A positive duration, or a 422 naming the query field (the same body as any validation error)."""
    try:
        parsed = parse_duration(value)
    except ValueError as exc:
        message = str(exc)
    else:
        if parsed > timedelta(0):
            return parsed
        message = f"must be longer than 0: {value!r}"
    raise RequestValidationError([{"loc": ("query", name), "msg": message, "type": "value_error", "input": value}])


async def _effectiveness(rt: RuntimeDep, window: str, since: str) -> EffectivenessReport:
    span, back = _duration(window, "window"), _duration(since, "since")
    now = rt.clock()
    return await effectiveness_report(rt.repo, since=now - back, window=span, now=now)


@api_router.get("/effectiveness", dependencies=[KnownQuery])
async def effectiveness_json(
    rt: RuntimeDep, window: DurationQuery = "24h", since: DurationQuery = "30d"
) -> dict[str, JsonValue]:
    """Outcomes (healed, recurred, escalated, open) per playbook, Xid and GPU model; recurrences; rungs."""
    report = await _effectiveness(rt, window, since)
    return report.as_dict()


@router.get("/reports/effectiveness", response_class=HTMLResponse)
async def effectiveness_page(rt: RuntimeDep, window: DurationQuery = "24h", since: DurationQuery = "30d") -> Response:
    try:
        report = await _effectiveness(rt, window, since)
    except RequestValidationError as exc:
        error = "; ".join(f"{e['loc'][-1]}: {e['msg']}" for e in exc.errors())
        return page("report_effectiveness.html", {"report": None, "error": error, "window": window,
                                                    "since": since, "refresh": 0,
                                                    "nav_here": "/reports/effectiveness"}, status_code=422)
    return page("report_effectiveness.html", {"report": report, "error": "", "window": window, "since": since,
                                               "refresh": 0, "nav_here": "/reports/effectiveness"})
