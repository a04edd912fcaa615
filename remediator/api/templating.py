"""Jinja2 rendering for the server-rendered pages, with autoescaping on and safe default headers.

Every HTML response goes through `page`, which adds the headers the approval links need: no caching, no
Referer (the token is in the URL), no framing, no indexing, and a strict Content-Security-Policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jinja2
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from remediator.domain.durations import format_duration
from remediator.domain.timestamps import as_utc

__all__ = ["SECURITY_HEADERS", "STATIC_DIR", "TEMPLATES_DIR", "age", "page", "render"]

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


def age(value: datetime | None, now: datetime | None = None) -> str:
    """`12 min ago`, `in 5 min`, `3 h ago`, `2 days ago` (relative to now)."""
    if value is None:
        return ""
    seconds = ((now or datetime.now(UTC)) - as_utc(value)).total_seconds()
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 45:
        return "just now" if not future else "in a moment"
    if seconds < 3600:
        text = f"{max(1, round(seconds / 60))} min"
    elif seconds < 48 * 3600:
        hours, minutes = divmod(int(seconds // 60), 60)
        text = f"{hours} h" + (f" {minutes} min" if minutes and hours < 10 else "")
    else:
        text = f"{int(seconds // 86400)} days"
    return f"in {text}" if future else f"{text} ago"


_WHEN = Markup('<time datetime="%s">%s</time> <span class="age">(%s)</span>')


def _when(value: datetime | None) -> Markup:
    """An absolute UTC time with its offset, and its age beside it."""
    if value is None:
        return Markup("-")
    value = as_utc(value)
    iso = value.isoformat(timespec="seconds")
    shown = value.strftime("%Y-%m-%d %H:%M:%S") + " UTC+00:00"
    return _WHEN % (iso, shown, age(value))  # `%` escapes each part (`Markup.format` is slower: 200 a list page)


def _seconds(value: float | None) -> str:
    """Seconds as a compact duration (`1h30m`), `-` for none."""
    if value is None:
        return "-"
    return format_duration(timedelta(seconds=round(value)))


def _short(value: object, limit: int = 120) -> str:
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
_env.filters["age"] = age
_DOCS = {"url": "/docs"}


def set_docs_url(url: str) -> None:
    """REMEDIATOR_DOCS_URL: where `runbook` links point (set once by create_app)."""
    _DOCS["url"] = url.rstrip("/")


def runbook(state: str) -> str:
    """The runbook section of a state (docs/operations.md `### State: <state>`)."""
    return f"{_DOCS['url']}/operations.md#state-{state}"


_env.filters["runbook"] = runbook


def render(template: str, context: Mapping[str, object]) -> str:
    return _env.get_template(template).render(**context)


def page(template: str, context: Mapping[str, object], status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(render(template, context), status_code=status_code, headers=dict(SECURITY_HEADERS))
