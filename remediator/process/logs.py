"""Process logging: plain text or one JSON object per line, with the remediation in hand on every record.

`REMEDIATOR_LOG_FORMAT=json` makes each record a JSON object (`ts`, `level`, `logger`, `message`, and
`remediation`, `node`, `gpu`, `rule` when the code that logged was working on a remediation) for log
pipelines that index fields. The executor says which remediation it drives through `log_fields`, a context
variable, so every line logged while driving it carries those fields without each call naming them.
Third-party chatter (alembic's migration steps, uvicorn's access lines, httpx request lines) is kept at
WARNING unless `REMEDIATOR_LOG_LEVEL=DEBUG`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TextIO

__all__ = [
    "CONTEXT_FIELDS", "QUIET_LOGGERS", "CancelledResetFilter", "ContextFilter", "JsonFormatter", "configure_logging",
    "log_context", "log_fields",
]

# What a record may carry about the remediation it concerns, in this order.
CONTEXT_FIELDS: tuple[str, ...] = ("remediation", "node", "gpu", "rule")

# Loggers whose INFO lines say nothing an operator acts on.
QUIET_LOGGERS: tuple[str, ...] = (
    "alembic", "alembic.runtime.migration", "uvicorn.access", "httpx", "httpcore", "aiosqlite", "asyncio",
)

log_fields: ContextVar[Mapping[str, str] | None] = ContextVar("remediator_log_fields", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Within the block, every record names these (non-empty) fields, on top of any already set."""
    merged = {**(log_fields.get() or {}), **{k: str(v) for k, v in fields.items() if v not in (None, "")}}
    token = log_fields.set(merged)
    try:
        yield
    finally:
        log_fields.reset(token)


class ContextFilter(logging.Filter):
    """Copies the current `log_fields` onto the record (an explicit `extra=` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (log_fields.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class CancelledResetFilter(logging.Filter):
    """Drop SQLAlchemy's pool traceback for a connection whose reset was cancelled.

    A task stopped mid-query (the worker's loops at shutdown, a read under `asyncio.timeout`) hands its
    connection back while cancelled; the pool's rollback is then cancelled too, the connection is discarded,
    and SQLAlchemy logs "Exception during reset or similar" at ERROR with a CancelledError traceback. Nothing
    is lost (the transaction was never committed and the connection is not reused), so the line would only
    teach operators to ignore ERRORs. Any other exception from the pool is still logged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("sqlalchemy.pool") or not record.exc_info:
            return True
        return not isinstance(record.exc_info[1], asyncio.CancelledError)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; the timestamp is UTC with its offset."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, str] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value not in (None, ""):
                out[key] = str(value)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class _TextFormatter(logging.Formatter):
    """The classic line, with `[remediation=… node=…]` appended when known."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        known = [f"{k}={getattr(record, k)}" for k in CONTEXT_FIELDS if getattr(record, k, None) not in (None, "")]
        return f"{line} [{' '.join(known)}]" if known else line


def configure_logging(level: str = "INFO", fmt: str = "text", *, stream: TextIO | None = None) -> logging.Handler:
    """Replace the root handlers with one handler in the chosen format; quiet third-party INFO chatter."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.addFilter(CancelledResetFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else _TextFormatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(quiet)
    return handler
