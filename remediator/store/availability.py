"""Whether the database answers: its failures classified once, and the controller's view of its availability.

A database that goes away for a while (a PostgreSQL failover or restart, a SQLite file locked by another
connection) is a transient failure: the controller keeps running, answers webhooks 503 (Alertmanager sends
them again), reports itself unready, pauses its workers and resumes by itself when the database answers.
Every store call turns a database failure into `StoreUnavailable` here (`store_unavailable`), with a short,
bounded `reason` for logs and metrics; anything else (a bug, a constraint the code should have avoided) is
left as it is.

Transient, by SQLSTATE (PostgreSQL) or by type:
- connection exceptions (class 08), a connection lost or refused, a socket error, a timeout;
- admin or crash shutdown and "the database system is starting up" (57P01, 57P02, 57P03);
- serialization failures and deadlocks (40001, 40P01): the transaction may simply run again;
- a read-only transaction (25006): connected to a standby in the middle of a failover;
- insufficient resources (class 53: too many connections, out of memory, disk full);
- SQLite: "database is locked" or "busy", a file that cannot be opened, a disk I/O error.

`DatabaseHealth` follows the store calls' outcomes (down at a transient failure of the connection kind,
up at the next success), logs each change once, and combines them with the replica guard's own view
(store/replica_guard.py) for `/readyz` and the `remediator_database_*` metrics.
"""

from __future__ import annotations

import enum
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import asyncpg  # type: ignore[import-untyped]
from alembic.util.exc import CommandError
from sqlalchemy import exc as sa_exc

from remediator.errors import StoreUnavailable

__all__ = [
    "DatabaseHealth", "GuardView", "MigrationFailure", "is_database_error", "migration_failure", "sqlite_write_check",
    "store_unavailable", "transient_reason",
]

log = logging.getLogger(__name__)

# SQLSTATE -> reason; a class (two characters) stands for all its codes.
_SQLSTATES: dict[str, str] = {
    "08": "unreachable",  # connection exception
    "57P01": "shutdown",  # admin_shutdown
    "57P02": "shutdown",  # crash_shutdown
    "57P03": "starting",  # cannot_connect_now (starting up, shutting down, in recovery)
    "40001": "conflict",  # serialization_failure
    "40P01": "conflict",  # deadlock_detected
    "25006": "read_only",  # read_only_sql_transaction: a standby, mid-failover
    "53": "resources",  # insufficient resources: too many connections, out of memory, disk full
}
# Reasons that say the database itself is not answering (the rest concern one transaction).
_OUTAGE = frozenset({"unreachable", "shutdown", "starting", "read_only", "resources", "timeout", "locked",
                     "unavailable"})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what SQLAlchemy wrapped (`orig`) and its causes, each once."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen or len(seen) > 16:
            continue
        seen.add(id(current))
        yield current
        for nested in (getattr(current, "orig", None), current.__cause__, current.__context__):
            if isinstance(nested, BaseException):
                todo.append(nested)


def _sqlstate(exc: BaseException) -> str | None:
    for attribute in ("sqlstate", "pgcode"):
        value = getattr(exc, attribute, None)
        if isinstance(value, str) and len(value) == 5:
            return value
    return None


def _sqlite_reason(exc: sqlite3.Error) -> str | None:
    if not isinstance(exc, sqlite3.OperationalError):
        return None  # a damaged file or a constraint: not cured by waiting
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return "locked"
    return "unavailable"  # unable to open the file, disk I/O error, read-only file system


def transient_reason(exc: BaseException) -> str | None:
    """Why `exc` is a transient database failure (a short label), or None when it is not one."""
    for current in _chain(exc):
        if isinstance(current, StoreUnavailable):
            return getattr(current, "reason", None) or "unavailable"
        state = _sqlstate(current)
        if state is not None:
            reason = _SQLSTATES.get(state) or _SQLSTATES.get(state[:2])
            if reason is not None:
                return reason
        if isinstance(current, sqlite3.Error):
            reason = _sqlite_reason(current)
            if reason is not None:
                return reason
        if isinstance(current, sa_exc.DBAPIError) and current.connection_invalidated:
            return "unreachable"
        if isinstance(current, sa_exc.DisconnectionError):
            return "unreachable"
        if isinstance(current, sa_exc.TimeoutError | TimeoutError):  # the pool's, or a socket's
            return "timeout"
        if isinstance(current, asyncpg.InterfaceError) and "closed" in str(current).lower():
            return "unreachable"  # "connection is closed": the server went away under it
        if isinstance(current, OSError | ConnectionError):
            return "unreachable"
    for current in _chain(exc):
        if isinstance(current, sa_exc.OperationalError):  # the DB-API's "not the program's fault" class
            return "unavailable"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def store_unavailable(exc: BaseException) -> StoreUnavailable | None:
    """`exc` as StoreUnavailable (with its `reason`) when it is a transient database failure, else None."""
    if isinstance(exc, StoreUnavailable):
        return exc
    reason = transient_reason(exc)
    if reason is None:
        return None
    error = StoreUnavailable(_first_line(exc))
    error.reason = reason
    return error


class MigrationFailure(enum.StrEnum):
    """Why migrating the database at start failed (`migration_failure`)."""

    DAMAGED = "damaged"  # a SQLite file that is not a database, or a corrupt one
    CANNOT_OPEN = "cannot_open"  # unreachable, unreadable, refused
    NEWER = "newer"  # a revision this version does not know: written by a newer version
    FAILED = "failed"  # a migration itself failed


def migration_failure(exc: BaseException) -> MigrationFailure | None:
    """What a failed migration (`db.upgrade_sync`) comes to, or None for an error that is not the database's."""
    if isinstance(exc, sa_exc.DBAPIError):
        orig = exc.orig
        if isinstance(orig, sqlite3.DatabaseError) and not isinstance(orig, sqlite3.OperationalError):
            return MigrationFailure.DAMAGED
        if exc.connection_invalidated or isinstance(orig, sqlite3.OperationalError | OSError):
            return MigrationFailure.CANNOT_OPEN
        return MigrationFailure.FAILED
    if isinstance(exc, OSError | ConnectionError):
        return MigrationFailure.CANNOT_OPEN
    if isinstance(exc, CommandError):
        return MigrationFailure.NEWER
    if isinstance(exc, sa_exc.SQLAlchemyError | ValueError | RuntimeError):
        return MigrationFailure.FAILED
    return None


def is_database_error(exc: BaseException) -> bool:
    """Whether `exc` is the database library's own error (a store that failed before it could map it)."""
    return isinstance(exc, sa_exc.SQLAlchemyError)


def sqlite_write_check(path: str, timeout: float) -> None:
    """Take the SQLite file's write lock and let it go at once, waiting at most `timeout` seconds for another
    connection's: sqlite3.OperationalError ("database is locked", "unable to open database file") otherwise.
    Opened read-write without create: a file that vanished is reported, not created empty."""
    uri = Path(path).resolve().as_uri() + "?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    finally:
        conn.close()


class GuardView(Protocol):
    """What the health needs of the replica guard (store/replica_guard.py)."""

    @property
    def problem(self) -> str | None: ...

    @property
    def problem_since(self) -> float | None: ...


class DatabaseHealth:
    """The database as the store's calls found it: up, or down since when and why. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._reason: str | None = None
        self.guard: GuardView | None = None  # set once the replica guard is held (engine/worker.py)

    def failed(self, error: StoreUnavailable) -> None:
        """A store call failed on a transient error; an outage (not a single transaction's conflict) counts."""
        reason = getattr(error, "reason", None) or "unavailable"
        if reason not in _OUTAGE:
            return
        with self._lock:
            if self._down_since is not None:
                return
            self._down_since, self._reason = self._clock(), f"{reason}: {error}"
        log.warning("the database is unavailable (%s): %s; webhooks answer 503, remediations wait until it "
                    "answers again", reason, error)

    def answered(self) -> None:
        """A store call succeeded."""
        if self._down_since is None:  # the common case, without the lock
            return
        with self._lock:
            if self._down_since is None:
                return
            down_for, self._down_since, self._reason = self._clock() - self._down_since, None, None
        log.warning("the database answers again after %.1f s unavailable", down_for)

    @property
    def problem(self) -> str | None:
        """Why the database cannot be used now (the replica guard first), None when it can."""
        guard = self.guard.problem if self.guard is not None else None
        return guard or self._reason

    def down_for(self) -> float:
        """Seconds since the database (or the guard's connection to it) stopped answering; 0 while it answers."""
        starts = [t for t in (self._down_since, self.guard.problem_since if self.guard else None) if t is not None]
        return max(0.0, self._clock() - min(starts)) if starts else 0.0

    @property
    def up(self) -> bool:
        return self.problem is None
