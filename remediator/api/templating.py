"""Jinja2 rendering for the server-rendered pages, with autoescaping on and safe default headers.

Every HTML response goes through `page`, which adds the headers the approval links need: no caching, no
Referer (the token is in the URL), no framing, no indexing, and a strict Content-Security-Policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jinja2
from fastapi.responses import HTMLResponse

from remediator.durations import format_duration

__all__ = ["SECURITY_HEADERS", "STATIC_DIR", "TEMPLATES_DIR", "page", "render"]

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
STATIC_DIR = Path(__file__).resolve().parent / "static"

SECURITY_HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex, nofollow",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
}


def _when(value: datetime | None) -> str:
    if value is None:
        return "-"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _seconds(value: float | None) -> str:
    """Seconds as a compact duration (`1h30m`), `-` for none."""
    if value is None:
        return "-"
    return format_duration(timedelta(seconds=round(value)))


def _short(value: Any, limit: int = 120) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["when"] = _when
_env.filters["short"] = _short
_env.filters["seconds"] = _seconds


def render(template: str, context: Mapping[str, Any]) -> str:
    return _env.get_template(template).render(**context)


def page(template: str, context: Mapping[str, Any], status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(render(template, context), status_code=status_code, headers=dict(SECURITY_HEADERS))
