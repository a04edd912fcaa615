"""Everything `remediator serve` must get right before it listens, each failure one line and an exit code.

The checks run before the web server starts, so a bad setting, a damaged database, a failed migration or a
second controller is reported as one line on stderr with its own exit code instead of a traceback:

    2  invalid settings (also: binding beyond loopback without a webhook token or an audit key, or an approver
       header without trusted proxies)
    4  the database cannot be opened: unreachable, unreadable, or a damaged SQLite file; or the disk holding
       the SQLite file is full (the line says where and how much is free)
    5  the schema migrations failed
    6  another controller holds this database's single-replica guard
    7  the guard was lost while running: another controller took it while the database was away (a lost
       database connection alone only pauses the controller, store/replica_guard.py); the controller stopped
    8  the worker process (REMEDIATOR_WORKER_PROCESS) exited on its own; the controller stopped
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from remediator.errors import ConfigError, ReplicaGuardError, StartupFailure, StoreUnavailable
from remediator.settings import Settings
from remediator.store import replica_guard
from remediator.store.availability import MigrationFailure, migration_failure
from remediator.store.db import describe_database, upgrade_sync
from remediator.store.intake_spool import prepare_spool, spool_path

__all__ = [
    "EXIT_CONFIG", "EXIT_DATABASE", "EXIT_GUARD_LOST", "EXIT_MIGRATIONS", "EXIT_REPLICA", "EXIT_WORKER_LOST",
    "check_approver_header", "prepare", "resolve_worker_process",
]

EXIT_CONFIG = 2
EXIT_DATABASE = 4
EXIT_MIGRATIONS = 5
EXIT_REPLICA = 6
EXIT_GUARD_LOST = 7
EXIT_WORKER_LOST = 8
# Below this much free space on the database's disk, `serve` does not start (its first writes would fail: the
# -shm alone is 32 KiB, each commit appends pages to the -wal).
START_MIN_FREE_BYTES = 1 << 20
_SQLITE_FULL = 13


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _migrate(url: str) -> None:
    where = describe_database(url)
    try:
        upgrade_sync(url)
    except Exception as exc:  # broad: the store classifies it (store/availability.py); anything else re-raised
        failure = migration_failure(exc)
        if failure is None:
            raise
        raise _migration_failure(where, failure, _first_line(exc)) from exc


def _migration_failure(where: str, failure: MigrationFailure, line: str) -> StartupFailure:
    if failure is MigrationFailure.DAMAGED:
        return StartupFailure(
            f"{where} is damaged ({line}): stop every controller using it, restore it from a backup or move it "
            "aside (a new empty one is created at start), then start again",
            EXIT_DATABASE,
        )
    if failure is MigrationFailure.CANNOT_OPEN:
        return StartupFailure(f"cannot open {where}: {line}", EXIT_DATABASE)
    if failure is MigrationFailure.NEWER:
        return StartupFailure(
            f"migrating {where} failed: {line} (a database written by a newer version? run the matching version)",
            EXIT_MIGRATIONS,
        )
    return StartupFailure(f"migrating {where} failed: {line}", EXIT_MIGRATIONS)


def check_approver_header(settings: Settings) -> None:
    """Fail closed: an approver header believed from any peer lets anyone who reaches the port approve as
    anyone, so the header needs the proxies it may come from. Raises StartupFailure (EXIT_CONFIG)."""
    if settings.approver_header and not settings.trusted_proxies:
        raise StartupFailure(
            f"REMEDIATOR_APPROVER_HEADER ({settings.approver_header}) is set but REMEDIATOR_TRUSTED_PROXIES is "
            "empty: any client could name itself the approver. Set REMEDIATOR_TRUSTED_PROXIES to the sign-in "
            "proxy's addresses or CIDRs (127.0.0.1 for a proxy in the same pod; docs/approvals.md), or unset "
            "REMEDIATOR_APPROVER_HEADER",
            EXIT_CONFIG,
        )


def _free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged process may still write on the file system holding `path` (None: cannot tell)."""
    try:
        st = os.statvfs(path if path.is_dir() else path.parent)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _disk_full_error(exc: BaseException | None) -> bool:
    """ENOSPC/EDQUOT or SQLITE_FULL anywhere in the chain of `exc`."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(exc, sqlite3.Error) and (
            getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL or "disk is full" in str(exc)
        ):
            return True
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
    return False


def _check_free_space(database: Path, exc: BaseException | None = None) -> None:
    """Raise StartupFailure (one line: where, how much is free) when the disk holding the database is full:
    less than START_MIN_FREE_BYTES free, or `exc` (a start-up write's failure) says so."""
    free = _free_bytes(database)
    low = free is not None and free < START_MIN_FREE_BYTES
    if not low and not _disk_full_error(exc):
        return
    raise StartupFailure(
        f"the disk holding {database} is full: {_size(free) if free is not None else 'an unknown amount'} "
        f"free, at least {_size(START_MIN_FREE_BYTES)} is needed to start: free some space or grow the volume, "
        "then start again", EXIT_DATABASE,
    ) from exc


def resolve_worker_process(settings: Settings) -> Settings:
    """The settings with REMEDIATOR_WORKER_PROCESS decided: unset (auto) is on for a SQLite file, where the
    second process gives the flood's webhooks and decisions a core each, and off for PostgreSQL and an
    in-memory SQLite database (a second process could not open the same one). true or false as given wins;
    true without a SQLite file is refused by `prepare`."""
    if settings.worker_process is not None:
        return settings
    return settings.model_copy(update={"worker_process": replica_guard.sqlite_file(settings.database_url) is not None})


def prepare(settings: Settings, owner: str) -> replica_guard.ReplicaGuard:
    """Check the settings and the audit key, take the replica guard, migrate. Raises StartupFailure with one
    line.

    The guard is held for the rest of the process; `serve` stops gracefully if it is lost later (its
    `on_lost` hook) and exits with EXIT_GUARD_LOST.
    """
    check_approver_header(settings)
    try:
        settings.audit_key_bytes()
    except ConfigError as exc:
        raise StartupFailure(str(exc), EXIT_CONFIG) from exc
    database = replica_guard.sqlite_file(settings.database_url)
    if settings.worker_process and database is None:
        raise StartupFailure(
            "REMEDIATOR_WORKER_PROCESS needs a SQLite database file (both processes open it); with PostgreSQL "
            "run more replicas instead (REMEDIATOR_ALLOW_MULTIPLE_REPLICAS)", EXIT_CONFIG,
        )
    if database is not None:
        _check_free_space(database)
    try:
        return _hold_and_migrate(settings, owner, database)
    except StartupFailure as failure:
        # A full disk fails SQLite in many ways ("database or disk is full", "disk I/O error" on its -shm,
        # ENOSPC from the lock file): whichever, say that the disk is full, where, and how full.
        if database is not None and failure.exit_code in (EXIT_DATABASE, EXIT_MIGRATIONS):
            _check_free_space(database, failure.__cause__)
        raise


def _hold_and_migrate(settings: Settings, owner: str, database: Path | None) -> replica_guard.ReplicaGuard:
    exclusive = settings.is_sqlite or not settings.allow_multiple_replicas
    try:
        guard, _ = replica_guard.hold(settings.database_url, owner, exclusive=exclusive)
    except ReplicaGuardError as exc:
        raise StartupFailure(str(exc), EXIT_REPLICA) from exc
    except (StoreUnavailable, OSError, ValueError) as exc:
        raise StartupFailure(f"cannot open {describe_database(settings.database_url)}: {exc}", EXIT_DATABASE) from exc
    _migrate(settings.database_url)
    if settings.worker_process and database is not None:
        try:
            prepare_spool(database)
        except (sqlite3.Error, OSError) as exc:
            raise StartupFailure(
                f"cannot open the intake spool {spool_path(database)}: {exc} (it lies beside the database; "
                "REMEDIATOR_WORKER_PROCESS stores webhooks there)", EXIT_DATABASE,
            ) from exc
    return guard
