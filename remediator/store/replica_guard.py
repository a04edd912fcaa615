"""The single-replica guard: a lock that dies with the process holding it.

SQLite supports one controller; PostgreSQL supports several only with ALLOW_MULTIPLE_REPLICAS. A lease row
would outlive a crashed controller and refuse its restart until the lease expired; these locks do not:

- SQLite: an exclusive `flock` on `<database>.lock` beside the database file, held for the process's
  lifetime. The kernel drops it when the process dies, however it dies.
- PostgreSQL: a session-level advisory lock taken on a dedicated connection kept open by a small thread.
  The server drops it when that session ends. Exclusive mode takes the guard key exclusively; with
  ALLOW_MULTIPLE_REPLICAS every replica takes it shared (so an exclusive controller and a group of
  replicas refuse each other) plus an exclusive lock on its own REPLICA_ID, so two replicas with the same
  identity (which would share leases) refuse each other too.

If the guard connection dies, the guard is suspended, not lost: the database may be restarting or failing
over. `problem` says why (the controller answers /readyz 503 and its workers pause) while a thread connects
again with capped backoff and takes the locks again, waiting up to TAKEOVER_GRACE_S for the dead session's
locks to go. Taken, the guard is held again and work resumes by itself. Refused, another controller took over
meanwhile: the guard is lost, `lost` is set and `on_lost` runs (the controller stops, exit code 7).
A process holds at most one guard per database; `hold` hands the same one to later callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

from remediator.errors import ReplicaGuardError, StoreUnavailable
from remediator.retrying import Backoff

__all__ = [
    "InheritedGuard", "NoGuard", "PostgresGuard", "ReplicaGuard", "SqliteFileGuard", "adopt", "drop", "guard_for",
    "held", "hold", "sqlite_file",
]

log = logging.getLogger(__name__)

GUARD_KEY = 7_313_010  # pg_try_advisory_lock(bigint): exclusive (one controller) or shared (replicas)
REPLICA_KEY = 7_313_011  # pg_try_advisory_lock(int, int) with a 32-bit hash of the REPLICA_ID
# After the guard connection came back: how long to wait for the locks of the session that died (the server
# releases them as that backend exits) before concluding that another controller holds them.
TAKEOVER_GRACE_S = 10.0
RECONNECT_BACKOFF_S = (0.25, 5.0)  # the guard connection's reconnect waits: base and cap of the backoff


class ReplicaGuard:
    """Held until `release()` or the end of the process."""

    description = "no guard"

    def __init__(self) -> None:
        self.lost = threading.Event()
        self.on_lost: Callable[[], None] | None = None
        self._problem: str | None = None  # why the guard is not held now (suspended or lost)
        self._problem_since: float | None = None  # time.monotonic() when it stopped being held

    @property
    def problem(self) -> str | None:
        """Why the guard is not held at the moment (its connection is down, or it was lost); None while held."""
        return self._problem

    @property
    def problem_since(self) -> float | None:
        """When (time.monotonic) the guard stopped being held; None while held."""
        return self._problem_since

    def acquire(self) -> None:
        """Take the lock or raise ReplicaGuardError naming the holder (StoreUnavailable: cannot tell)."""

    def release(self) -> None:
        """Let go (the process exiting does the same)."""

    @property
    def inheritable_fd(self) -> int | None:
        """A descriptor that keeps the guard held in a child process it is passed to (SQLite's flock)."""
        return None

    @property
    def inheritable_fds(self) -> tuple[int, ...]:
        """Every descriptor a child process needs to keep the guard held (`inheritable_fd` first)."""
        return () if self.inheritable_fd is None else (self.inheritable_fd,)

    def _suspend(self, why: str) -> None:
        """Not held for now (the database is away): work pauses until `_resume` or `_lose`."""
        if self._problem is None:
            self._problem_since = time.monotonic()
            log.warning("the single-replica guard is not held (%s): work pauses until the database answers "
                        "and the guard is taken again", why)
        self._problem = f"replica guard not held: {why}"

    def _resume(self) -> None:
        if self._problem is not None and not self.lost.is_set():
            down = time.monotonic() - (self._problem_since or time.monotonic())
            self._problem, self._problem_since = None, None
            log.warning("the single-replica guard is held again after %.1f s: work resumes", down)

    def _lose(self, why: str) -> None:
        if self.lost.is_set():
            return
        log.error("lost the single-replica guard (%s): this controller stops working", why)
        if self._problem_since is None:
            self._problem_since = time.monotonic()
        self._problem = f"lost the single-replica guard: {why}"
        self.lost.set()
        if self.on_lost is not None:
            self.on_lost()


class NoGuard(ReplicaGuard):
    """An in-memory SQLite database: nobody else can open it."""


class SqliteFileGuard(ReplicaGuard):
    def __init__(self, database: Path, owner: str) -> None:
        super().__init__()
        self.database = database
        self.path = database.with_name(database.name + ".lock")
        self.owner = owner
        self.description = f"file lock {self.path}"
        self._fd: int | None = None
        self._database_fd: int | None = None

    def acquire(self) -> None:
        """The lock file names the holder; the lock on the database file itself guards the file, whatever
        name it is reached by (a hard link under another name has its own `.lock` file, not its own inode).
        flock and SQLite's own POSIX locks do not interact on a local file system."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create the lock file {self.path}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 512).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ReplicaGuardError(
                f"another controller replica ({holder}) is running on the SQLite database {self.database}; "
                "SQLite supports one replica: stop it first, or use "
                "REMEDIATOR_DATABASE_URL=postgresql+asyncpg://... for several"
            ) from None
        try:
            self._database_fd = _lock_database_file(self.database)
            os.ftruncate(fd, 0)
            os.write(fd, f"{self.owner}, pid {os.getpid()}\n".encode())
        # broad: BaseException so both descriptors are closed whatever interrupted taking the guard; re-raised
        except BaseException:
            self._close_database_fd()
            os.close(fd)
            raise
        self._fd = fd

    @property
    def inheritable_fd(self) -> int | None:
        # flock belongs to the open file description: a child given this descriptor holds the same lock, so
        # the guard stays held until the parent and the child have both exited.
        return self._fd

    @property
    def inheritable_fds(self) -> tuple[int, ...]:
        return tuple(fd for fd in (self._fd, self._database_fd) if fd is not None)

    def release(self) -> None:
        self._close_database_fd()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def _close_database_fd(self) -> None:
        if self._database_fd is not None:
            _unlock_database_file(self._database_fd)
            self._database_fd = None


# Database files this process opened for the guard, by (device, inode): descriptor and whether a guard holds
# it now. They stay open once opened: closing any descriptor of a file drops every POSIX lock the process has
# on it, SQLite's own among them, while its connections may still be open.
_DATABASE_FDS: dict[tuple[int, int], tuple[int, bool]] = {}
_DATABASE_FDS_LOCK = threading.Lock()


def _refused(database: Path, dev: int, ino: int) -> ReplicaGuardError:
    return ReplicaGuardError(
        f"another controller replica is running on the SQLite database {database} under another name (the "
        f"same file, device {dev} inode {ino}: a hard link); SQLite supports one replica: stop it first, or use "
        "REMEDIATOR_DATABASE_URL=postgresql+asyncpg://... for several"
    )


def _lock_database_file(database: Path) -> int:
    """An exclusive flock on the database file itself (created empty if missing, as SQLite would); raises
    ReplicaGuardError when another controller holds it, under this name or another."""
    with _DATABASE_FDS_LOCK:
        try:
            st = os.stat(database)
            known = _DATABASE_FDS.get((st.st_dev, st.st_ino))
        except FileNotFoundError:
            known = None
        if known is not None and known[1]:
            raise _refused(database, st.st_dev, st.st_ino)
        if known is not None:
            fd = known[0]
        else:
            try:
                fd = os.open(database, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreUnavailable(f"cannot open {database}: {exc.strerror or exc}") from exc
        st = os.fstat(fd)
        _DATABASE_FDS[(st.st_dev, st.st_ino)] = (fd, False)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refused(database, st.st_dev, st.st_ino) from None
        _DATABASE_FDS[(st.st_dev, st.st_ino)] = (fd, True)
        return fd


def _unlock_database_file(fd: int) -> None:
    with _DATABASE_FDS_LOCK, contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
        st = os.fstat(fd)
        _DATABASE_FDS[(st.st_dev, st.st_ino)] = (fd, False)


class InheritedGuard(ReplicaGuard):
    """The guard of a worker process: the parent's flock descriptor, passed to it at start.

    Held for as long as this process keeps the descriptor open, whatever the parent does meanwhile; the parent
    stays the one that acquired it.
    """

    def __init__(self, fd: int, description: str) -> None:
        super().__init__()
        self._fd: int | None = fd
        self.description = f"{description}, shared with the parent process"

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _replica_hash(owner: str) -> int:
    return int.from_bytes(hashlib.sha256(owner.encode()).digest()[:4], "big", signed=True)


_HOLDERS = """
SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database
      WHERE datname = current_database()) AND l.classid = $1 AND l.objid = $2 AND l.objsubid = $3
"""


# (tried at once, waited for): the guard's advisory locks
_EXCLUSIVE = ("pg_try_advisory_lock($1::bigint)", "pg_advisory_lock($1::bigint)")
_SHARED = ("pg_try_advisory_lock_shared($1::bigint)", "pg_advisory_lock_shared($1::bigint)")
_REPLICA = ("pg_try_advisory_lock($1::int, $2::int)", "pg_advisory_lock($1::int, $2::int)")


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PostgresGuard(ReplicaGuard):
    """Advisory lock on a dedicated connection, watched by a daemon thread with its own event loop."""

    def __init__(
        self, url: str, owner: str, *, exclusive: bool, check_interval: float = 1.0,
        takeover_grace: float = TAKEOVER_GRACE_S,
    ) -> None:
        super().__init__()
        parsed = make_url(url).set(drivername="postgresql")
        self.dsn = parsed.render_as_string(hide_password=False)
        self.where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}/{parsed.database}"
        self.owner = owner
        self.exclusive = exclusive
        self.check_interval = check_interval
        self.takeover_grace = takeover_grace
        self.description = f"PostgreSQL advisory lock on {self.where}"
        self._ready = threading.Event()
        self._error: Exception | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None  # set by a stop or by the guard connection closing
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        self._thread = threading.Thread(target=self._run, name="replica-guard", daemon=True)
        self._thread.start()
        if not self._ready.wait(60):
            raise StoreUnavailable(f"PostgreSQL at {self.where} did not answer the replica guard in 60 s")
        if self._error is not None:
            raise self._error

    def release(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop_now)
            self._thread.join(10)

    def _stop_now(self) -> None:
        assert self._stop is not None and self._wake is not None
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        asyncio.run(self._main())

    def _fail_start(self, error: Exception) -> None:
        self._error = error
        self._ready.set()

    async def _main(self) -> None:
        """Connect, take the locks, watch the connection; while it is down, connect again (suspended)."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        backoff = Backoff(*RECONNECT_BACKOFF_S)
        while not self._stop.is_set() and not self.lost.is_set():
            try:
                conn = await asyncpg.connect(self.dsn, timeout=30, server_settings={
                    "application_name": f"remediator {self.owner}"[:63],
                    # The server notices a vanished controller within about 25 s even without a FIN.
                    "tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3",
                })
            except Exception as exc:  # whatever failed, the guard is not held
                if not self._ready.is_set():
                    self._fail_start(StoreUnavailable(f"cannot reach PostgreSQL at {self.where}: {exc}"))
                    return
                self._suspend(f"cannot reach PostgreSQL at {self.where}: {_line(exc)}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=backoff.next(exc))
                continue
            try:
                if await self._hold(conn):
                    backoff.reset()
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), timeout=5)
            if self._error is not None:
                return  # refused or failed at start: acquire() raises `_error`

    async def _hold(self, conn: asyncpg.Connection) -> bool:
        """Take the locks on `conn`, then watch it until a stop or its failure. True if the locks were taken."""
        assert self._stop is not None and self._wake is not None
        starting = not self._ready.is_set()
        try:
            refused = await self._lock(conn, wait=None if starting else self.takeover_grace)
        except Exception as exc:  # the connection failed under the lock statements
            if starting:
                self._fail_start(StoreUnavailable(f"PostgreSQL at {self.where}: {exc}"))
            else:
                self._suspend(f"the guard connection to {self.where} failed: {_line(exc)}")
            return False
        if refused is not None:
            if starting:
                self._fail_start(refused)
            else:
                self._lose(f"another controller took over while the database was away: {refused}")
            return False
        if starting:
            self._ready.set()
        else:
            self._resume()
        self._wake.clear()
        wake, stop = self._wake, self._stop
        conn.add_termination_listener(lambda _c: wake.set())
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=self.check_interval)
                if stop.is_set():
                    break
                if conn.is_closed():
                    self._suspend(f"the guard connection to {self.where} was closed")
                    break
                await conn.fetchval("SELECT 1", timeout=max(5.0, self.check_interval * 5))
        except Exception as exc:  # a failed ping: the connection is gone
            if not stop.is_set():
                self._suspend(f"the guard connection to {self.where} failed: {_line(exc)}")
        return True

    async def _take(self, conn: asyncpg.Connection, calls: tuple[str, str], *args: int, wait: float | None) -> bool:
        """One advisory lock: tried at once (`wait` None), or waited for up to `wait` seconds."""
        if wait is None:
            return bool(await conn.fetchval(f"SELECT {calls[0]}", *args))
        await conn.execute(f"SET lock_timeout = {max(1, int(wait * 1000))}")
        try:
            await conn.execute(f"SELECT {calls[1]}", *args)
        except asyncpg.LockNotAvailableError:
            return False
        finally:
            await conn.execute("RESET lock_timeout")
        return True

    async def _lock(self, conn: asyncpg.Connection, *, wait: float | None = None) -> ReplicaGuardError | None:
        """Take the guard's locks; the reason when another controller holds them.

        `wait`: after a reconnect, wait that long for each lock (the dead session's may not be released yet)."""
        if self.exclusive:
            if not await self._take(conn, _EXCLUSIVE, GUARD_KEY, wait=wait):
                holders = await self._holders(conn, 0, GUARD_KEY, 1)
                return ReplicaGuardError(
                    f"another controller replica ({holders}) is running on this database ({self.where}); set "
                    "REMEDIATOR_ALLOW_MULTIPLE_REPLICAS=true on every replica to run several"
                )
            return None
        if not await self._take(conn, _SHARED, GUARD_KEY, wait=wait):
            holders = await self._holders(conn, 0, GUARD_KEY, 1)
            return ReplicaGuardError(
                f"a controller without REMEDIATOR_ALLOW_MULTIPLE_REPLICAS ({holders}) is running on this database "
                f"({self.where}); stop it or set the option on it too"
            )
        ident = _replica_hash(self.owner)
        if not await self._take(conn, _REPLICA, REPLICA_KEY, ident, wait=wait):
            return ReplicaGuardError(
                f"another controller replica with REMEDIATOR_REPLICA_ID={self.owner} is running on this database "
                f"({self.where}); every replica needs its own id (the pod name)"
            )
        return None

    async def _holders(self, conn: asyncpg.Connection, classid: int, objid: int, subid: int) -> str:
        try:
            rows = await conn.fetch(_HOLDERS, classid, objid, subid)
        except asyncpg.PostgresError:
            return "unknown"
        names = sorted({str(r["application_name"] or "unknown").removeprefix("remediator ") for r in rows})
        return ", ".join(names) or "unknown"


def sqlite_file(database_url: str) -> Path | None:
    """The file of a SQLite database (None for PostgreSQL or an in-memory database)."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database).resolve()


def guard_for(database_url: str, owner: str, *, exclusive: bool) -> ReplicaGuard:
    if make_url(database_url).get_backend_name() == "sqlite":
        database = sqlite_file(database_url)
        return NoGuard() if database is None else SqliteFileGuard(database, owner)
    return PostgresGuard(database_url, owner, exclusive=exclusive)


_HELD: dict[str, ReplicaGuard] = {}
_HELD_LOCK = threading.Lock()


def held(database_url: str) -> ReplicaGuard | None:
    """The guard this process holds for that database, if any."""
    with _HELD_LOCK:
        return _HELD.get(database_url)


def hold(database_url: str, owner: str, *, exclusive: bool) -> tuple[ReplicaGuard, bool]:
    """This process's guard for the database: the one it holds already, else a newly acquired one.

    Returns (guard, acquired_now); only the caller that acquired it should `drop` it.
    """
    with _HELD_LOCK:
        guard = _HELD.get(database_url)
        if guard is not None and not guard.lost.is_set():
            return guard, False
        guard = guard_for(database_url, owner, exclusive=exclusive)
        guard.acquire()
        _HELD[database_url] = guard
        return guard, True


def adopt(database_url: str, guard: ReplicaGuard) -> None:
    """Make `guard` this process's guard for the database (a worker process's inherited one)."""
    with _HELD_LOCK:
        _HELD[database_url] = guard


def drop(database_url: str, guard: ReplicaGuard) -> None:
    """Release a guard taken with `hold`."""
    with _HELD_LOCK:
        if _HELD.get(database_url) is guard:
            del _HELD[database_url]
    guard.release()
