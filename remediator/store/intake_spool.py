"""Webhook batches spooled to a SQLite file of their own while the worker runs in another process.

With REMEDIATOR_WORKER_PROCESS the worker process holds the database's one writer for its decision batches,
admissions and steps, tens to hundreds of milliseconds each under a flood, and a webhook that committed into
the same file waited for them (docs/PERFORMANCE.md). Instead, the web process appends each group of webhook
batches, raw body and all, to a spool file beside the database (`remediator.intake.db` for `remediator.db`):
its own WAL and its own writer, fsynced before the 200 exactly like the direct intake, so "acknowledged"
still means "survives a power cut". Repeats are counted when the webhook is answered, against the alerts in
the database and the first deliveries still spooled.

The worker moves spooled batches into the database in arrival order (`IntakeStore.move_spooled`): one
transaction inserts them into the database, skipping any batch a move interrupted by a crash had already
inserted; a second removes them from the spool. A crash between the two repeats nothing. Any worker moves
what it finds in the spool, so batches left by a worker process are decided after a restart without one.

The file is watched, since what the web process acknowledges must be in the file the worker reads. Each
process holds the spool's main file open with a shared flock beside its SQLite connection, and before each
use compares that file (device and inode, and its size: SQLite never shrinks the spool) with what is at the
path now:

- Removed or replaced (an operator's `rm`, a volume remount, a log cleaner): the web process stops
  acknowledging (StoreUnavailable, so 503 with the reason, and /readyz 503) instead of appending to a file no
  new process would ever read; the worker keeps moving what the file it holds still has, through the
  connection it has open, so nothing acknowledged before is lost. A restart creates a new spool.
- Damaged (truncated, or SQLite finds it malformed): the process that finds it lets go of its connection; the
  first process that then holds the file alone (an exclusive flock on it succeeds) sets it aside under a
  timestamped name (never deleted: `remediator.intake.db.damaged-20260101T000000Z`, with its -wal and -shm)
  and the web process creates a fresh spool, so intake recovers without a restart. A damaged file found at
  start is set aside the same way. Each file is set aside only once nobody holds it, because SQLite deletes a
  connection's -wal and -shm by name when its last connection closes: closed after the set-aside, it would
  delete the fresh spool's.

Each such event is logged at ERROR and counted (`on_problem`, metric remediator_intake_spool_problems_total).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar, TypeVarTuple
from urllib.parse import quote

from remediator.errors import RemediatorError, SpoolUnavailable
from remediator.store.db import BUSY_TIMEOUT_S
from remediator.store.sqlite_intake import begin_immediate, durable_connection, rows_for_keys, sqlite_time

__all__ = ["DAMAGED", "DISPLACED", "IntakeSpool", "Spooled", "prepare_spool", "spool_path"]

log = logging.getLogger(__name__)

T = TypeVar("T")
A = TypeVar("A")
Ts = TypeVarTuple("Ts")

# The problems `on_problem` is told of (the metric's `problem` label).
DISPLACED = "displaced"  # the file held is no longer the file at the spool's path
DAMAGED = "damaged"  # truncated or malformed; set aside
_SIDE_FILES = ("-wal", "-shm")


class _Damaged(RemediatorError):
    """The spool file held is damaged (raised inside the spool's thread only)."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS spooled (seq INTEGER PRIMARY KEY AUTOINCREMENT, batch_id TEXT NOT NULL, "
    "received_at TEXT NOT NULL, alert_count INTEGER NOT NULL, body BLOB NOT NULL)",
    # First deliveries still spooled: a later delivery of the same alert is a repeat before it is moved.
    "CREATE TABLE IF NOT EXISTS spooled_keys (dedup_key TEXT PRIMARY KEY, seq INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS spooled_keys_seq ON spooled_keys (seq)",
    # A spooled body the worker could not read back (a payload model changed across an upgrade): kept, not lost.
    "CREATE TABLE IF NOT EXISTS rejected (seq INTEGER PRIMARY KEY, batch_id TEXT NOT NULL, received_at TEXT NOT "
    "NULL, body BLOB NOT NULL, error TEXT NOT NULL)",
)


def spool_path(database: Path) -> Path:
    """The spool file beside a SQLite database file: `remediator.db` -> `remediator.intake.db`."""
    return database.with_name(f"{database.stem}.intake{database.suffix}")


def prepare_spool(database: Path) -> Path:
    """Create (or open) the spool file beside `database` and its tables, now: a spool that cannot be written
    stops the controller at start rather than failing every webhook. A damaged one is set aside and replaced
    (logged at ERROR). Raises sqlite3.Error or OSError."""
    path = spool_path(database)
    spool = IntakeSpool(path)
    try:
        spool.prepare()
    except SpoolUnavailable as exc:
        cause = exc.__cause__
        raise cause if isinstance(cause, sqlite3.Error | OSError) else sqlite3.OperationalError(str(exc)) from exc
    finally:
        spool.release()
    return path


def _connect(path: Path, *, create: bool) -> sqlite3.Connection:
    """The intake's kind of connection (fsynced commits), the spool's tables created if missing; without
    `create`, only an existing file is opened."""
    conn = durable_connection(path if create else f"file:{quote(str(path))}?mode=rw", uri=not create)
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
    # broad: BaseException so the connection is closed whatever interrupted creating the schema; re-raised
    except BaseException:
        conn.close()
        raise
    return conn


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _is_damage(exc: sqlite3.Error) -> bool:
    """SQLITE_CORRUPT or SQLITE_NOTADB: the file, not the moment (locks, I/O, a full disk) is at fault."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(
        exc, sqlite3.OperationalError | sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError
    )


def _aside_name(path: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return path.with_name(f"{path.name}.damaged-{stamp}")


@dataclass(frozen=True)
class Spooled:
    """One spooled webhook batch, as the worker reads it back."""

    seq: int
    batch_id: str
    received_at: str  # as stored in the database (`sqlite_time`)
    alert_count: int
    body: bytes


class IntakeSpool:
    """The spool file, used from one thread of its own (the web process appends, the worker process moves).

    `database` is the database file whose alerts count as known when repeats are counted (web side only).
    The process that calls `open` appends (and creates the file); any other only reads and removes what it
    moved, and never creates it.
    """

    def __init__(self, path: Path, database: Path | None = None) -> None:
        self.path = path
        self._database = database
        self._conn: sqlite3.Connection | None = None
        self._read: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="remediator-spool")
        self._appender = False
        # The main file held beside the connection (shared flock): its identity and the largest size seen.
        self._fd: int | None = None
        self._held: tuple[int, int] | None = None
        self._size = 0
        self._displaced: str | None = None  # why webhooks are refused (the file held is not at the path)
        self._damaged: str | None = None  # why the file held was let go, until it is set aside
        self._let_go: tuple[int, int] | None = None  # a damaged file this process let go (not opened again)
        self.on_problem: Callable[[str], None] | None = None  # DISPLACED or DAMAGED, once per event

    def exists(self) -> bool:
        return self.path.exists()

    async def open(self) -> None:
        """Create the spool file (and its tables) now, before the first webhook or the worker process. From now
        on this process appends."""
        self._appender = True
        await self._call(self._guarded, lambda conn: None)

    def prepare(self) -> None:
        """`open`, synchronously, for the checks at start (`prepare_spool`); `release` lets go again."""
        self._appender = True
        self._guarded(lambda conn: None)

    def release(self) -> None:
        """Let go of the file (synchronously, from the thread that used it)."""
        self._reset()
        self._thread.shutdown(wait=False)

    async def problem(self) -> str | None:
        """Why the spool refuses webhooks now, None while it takes them (looks at the file first)."""
        return await self._call(self._problem)

    async def append(
        self, batches: Sequence[tuple[str, bytes, int]], keyed: Sequence[Sequence[str]], received: datetime
    ) -> list[int]:
        """Spool `(batch id, body, alert count)` batches in one fsynced transaction; the repeats of each.

        `keyed` holds each batch's alerts' dedup keys in order: an alert is a repeat when its key is in the
        database, still spooled, or earlier in this group."""
        keys = sorted({k for batch in keyed for k in batch})
        return await self._call(self._append, batches, keyed, keys, sqlite_time(received))

    async def pending(self, max_alerts: int) -> list[Spooled]:
        """The oldest spooled batches, up to `max_alerts` alerts (always at least one batch)."""
        return await self._call(self._read_held, self._pending, max_alerts, [])

    async def alert_count(self) -> int:
        """The alerts spooled and not yet moved (0 without a spool file). Counted in the file held, also when
        it was removed from the path: acknowledged alerts still there are not reported as gone."""
        return await self._call(self._read_held, self._count, None, 0)

    async def forget(self, through: int, rejected: Sequence[tuple[Spooled, str]] = ()) -> None:
        """Remove the batches up to `through` (moved into the database); keep `rejected` ones apart."""
        await self._call(self._forget, through, list(rejected))

    async def close(self) -> None:
        if self._conn is not None or self._read is not None or self._fd is not None:
            await asyncio.get_running_loop().run_in_executor(self._thread, self._reset)
        self._thread.shutdown(wait=False)

    async def _call(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    # -- the file held (all below run on the spool's thread) --

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        """Take the file at the path (shared flock, identity), then its SQLite connection."""
        if self._appender:
            self._clear_orphans()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        else:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits out a set-aside under way (an exclusive flock, brief)
            st = os.fstat(fd)
            if _identity(os.stat(self.path)) != _identity(st):
                raise sqlite3.OperationalError(f"{self.path} changed while it was opened")
        # broad: BaseException so the descriptor is closed whatever interrupted taking the lock; re-raised
        except BaseException:
            os.close(fd)
            raise
        # Held from here, also when SQLite finds the file damaged: `_recover` sets aside this very file.
        self._fd, self._held, self._size = fd, _identity(st), st.st_size
        try:
            conn = _connect(self.path, create=self._appender)
            try:
                if self._appender:
                    found = conn.execute("PRAGMA quick_check").fetchone()
                    if found is None or found[0] != "ok":
                        raise sqlite3.DatabaseError(f"quick_check: {found[0] if found else 'no answer'}")
            # broad: BaseException so the connection is closed whatever interrupted the check; re-raised
            except BaseException:
                conn.close()
                raise
        except sqlite3.Error as exc:
            if not _is_damage(exc):
                self._reset()
            raise
        # broad: BaseException so the spool is reset whatever interrupted opening it; re-raised
        except BaseException:
            self._reset()
            raise
        self._size = max(self._size, os.fstat(fd).st_size)
        return conn

    def _look(self) -> None:
        """Compare the file held with the path: note it displaced (once), raise _Damaged when it shrank."""
        if self._fd is None or self._held is None:
            return
        size = os.fstat(self._fd).st_size
        if size < self._size:
            raise _Damaged(f"truncated from {self._size} to {size} bytes")
        self._size = size
        try:
            here: tuple[int, int] | None = _identity(os.stat(self.path))
        except FileNotFoundError:
            here = None
        if here == self._held or self._displaced is not None:
            return
        aside = self._aside_copy_of_held()
        if aside is not None:  # another process found it damaged and moved it aside
            raise _Damaged(f"set aside as {aside.name} by the other process")
        what = "removed" if here is None else "replaced by another file"
        self._displaced = (
            f"intake spool {self.path} was {what} while in use: webhooks are refused so that none is "
            "acknowledged into a file that no new process would read; what it holds is still moved into the "
            "database; restart the controller to start a new spool"
        )
        if self._appender:
            log.error("%s", self._displaced)
            if self.on_problem is not None:
                self.on_problem(DISPLACED)
        else:
            log.error("intake spool %s was %s while in use: moving what it holds through the open file",
                      self.path, what)

    def _aside_copy_of_held(self) -> Path | None:
        """The set-aside name the file held now has, if another process set it aside."""
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.path.parent):
                named = entry.name.startswith(f"{self.path.name}.damaged-") and not entry.name.endswith(_SIDE_FILES)
                if named and _identity(entry.stat(follow_symlinks=False)) == self._held:
                    return Path(entry.path)
        return None

    def _problem(self) -> str | None:
        if not self._appender:
            return None
        try:
            self._guarded(lambda conn: None)
        except SpoolUnavailable as exc:
            return str(exc)
        return self._displaced

    def _found_damaged(self, why: str) -> None:
        """Let go of the connection to a damaged file (keeping the flock until `_recover`)."""
        if self._damaged is None:
            self._damaged = f"intake spool {self.path} is damaged ({why})"
            log.error("%s: it is set aside and a new one started once no process holds it", self._damaged)
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def _recover(self) -> None:
        """Set the damaged file aside once this process alone holds it; the appender starts a fresh one.

        Raises SpoolUnavailable while another process still holds it (it lets go at its next use). The worker
        does not wait: it moves only the main file aside (the other process's connection still uses the -wal
        and -shm, which SQLite deletes by name when the last connection closes) and lets go; the web process
        finds its file under the set-aside name and finishes the job."""
        assert self._damaged is not None
        fd, held = self._fd, self._held
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alone = True
            except BlockingIOError:
                if self._appender:  # the file stays held, to try again at the next webhook
                    raise SpoolUnavailable(
                        f"{self._damaged}: waiting for the other process to let go of it") from None
                alone = False
            try:
                aside = self._set_aside(held, alone)
            finally:
                os.close(fd)  # the flock goes with it
                self._fd = self._held = None
                self._size = 0
            if aside is not None:
                log.error("%s: set aside as %s (kept for recovery, e.g. `sqlite3 %s .recover`)",
                          self._damaged, aside, aside)
                if self.on_problem is not None:
                    self.on_problem(DAMAGED)
        self._let_go = held
        self._damaged = None
        if self._appender:
            self._connection()
            log.warning("intake spool %s started afresh: webhooks are stored again", self.path)

    def _set_aside(self, held: tuple[int, int] | None, alone: bool) -> Path | None:
        """Rename the damaged file at the path (and, `alone`, its -wal and -shm) to one timestamped name; the
        name it got when it is here. None when another process set it aside already."""
        if held is None:
            return None
        if self._at_path() == held:
            aside = _aside_name(self.path)
            os.rename(self.path, aside)
        else:
            found = self._aside_copy_of_held()
            if found is None or not alone:
                return None
            aside = found
            held = None  # set aside and counted by the other process; its side files follow it here
        if alone and not self.path.exists():
            for suffix in _SIDE_FILES:
                with contextlib.suppress(FileNotFoundError):
                    os.rename(f"{self.path}{suffix}", f"{aside}{suffix}")
        return aside if held is not None else None

    def _at_path(self) -> tuple[int, int] | None:
        try:
            return _identity(os.stat(self.path))
        except FileNotFoundError:
            return None

    def _clear_orphans(self) -> None:
        """A -wal or -shm without its main file (left by a crash after the file was removed) would be read as
        the fresh spool's own: set them aside first."""
        if self.path.exists():
            return
        orphans = [Path(f"{self.path}{suffix}") for suffix in _SIDE_FILES if Path(f"{self.path}{suffix}").exists()]
        if orphans:
            aside = _aside_name(self.path)
            for orphan in orphans:
                os.rename(orphan, f"{aside}{orphan.name.removeprefix(self.path.name)}")
            log.error("intake spool %s: its -wal/-shm had no main file; set aside as %s-wal/-shm", self.path, aside)

    def _read_held(self, fn: Callable[[sqlite3.Connection, A], T], arg: A, empty: T) -> T:
        """A read (or move) through the file held; without one, through the file at the path if there is one
        (never created here, never one let go as damaged)."""
        if self._conn is None and not self._appender:
            if self._damaged is not None:
                with contextlib.suppress(SpoolUnavailable):
                    self._recover()
            here = self._at_path()
            if here is None or here == self._let_go:
                return empty
        return self._guarded(lambda conn: fn(conn, arg))

    def _known(self, keys: Sequence[str]) -> set[str]:
        """Keys of alerts already in the database (read beside its writer: WAL readers never wait)."""
        if self._database is None or not keys:
            return set()
        if self._read is None:
            self._read = sqlite3.connect(
                self._database, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        found = rows_for_keys(self._read, "SELECT dedup_key FROM alerts WHERE dedup_key IN ({marks})", keys)
        return {str(k) for (k,) in found}

    def _guarded(self, fn: Callable[[sqlite3.Connection], T], *, writes: bool = False) -> T:
        """`fn` on the connection. A damaged file is let go of and set aside; the appender then retries once
        on the fresh spool. `writes`: the appender refuses while the file held is displaced."""
        for _attempt in (1, 2):
            try:
                if self._damaged is not None:
                    self._recover()
                    if not self._appender:
                        raise SpoolUnavailable(f"intake spool {self.path.name} was damaged and set aside")
                self._look()
                if writes and self._displaced is not None:
                    raise SpoolUnavailable(self._displaced)
                return fn(self._connection())
            except _Damaged as exc:
                self._found_damaged(str(exc))
            except sqlite3.Error as exc:
                if not _is_damage(exc):
                    if self._displaced is None and self._damaged is None:
                        self._reset()  # the file is still the one at the path: open it again next time
                    raise SpoolUnavailable(f"intake spool {self.path.name}: {exc}") from exc
                self._found_damaged(str(exc))
            except OSError as exc:
                raise SpoolUnavailable(f"intake spool {self.path}: {exc.strerror or exc}") from exc
        raise SpoolUnavailable(f"{self._damaged or f'intake spool {self.path.name} is damaged'}: try again")

    def _append(
        self, batches: Sequence[tuple[str, bytes, int]], keyed: Sequence[Sequence[str]], keys: Sequence[str],
        received: str | None,
    ) -> list[int]:
        def run(conn: sqlite3.Connection) -> list[int]:
            begin_immediate(conn)
            try:
                # The spool's lock first, then the database: a move commits into the database before it takes
                # the spool's lock to forget, so a key is always found in one of the two.
                known = self._known(keys)
                spooled = rows_for_keys(conn, "SELECT dedup_key FROM spooled_keys WHERE dedup_key IN ({marks})", keys)
                known.update(str(k) for (k,) in spooled)
                repeats: list[int] = []
                for (batch_id, body, count), batch_keys in zip(batches, keyed, strict=True):
                    seq = conn.execute(
                        "INSERT INTO spooled (batch_id, received_at, alert_count, body) VALUES (?, ?, ?, ?)",
                        (batch_id, received, count, body),
                    ).lastrowid
                    first = []
                    for key in batch_keys:
                        if key not in known:
                            known.add(key)
                            first.append((key, seq))
                    conn.executemany("INSERT INTO spooled_keys (dedup_key, seq) VALUES (?, ?)", first)
                    repeats.append(len(batch_keys) - len(first))
                conn.execute("COMMIT")
            # broad: BaseException so the transaction is rolled back whatever interrupted it (a cancel too); re-raised
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
            return repeats

        return self._guarded(run, writes=True)

    @staticmethod
    def _count(conn: sqlite3.Connection, _arg: None) -> int:
        return int(conn.execute("SELECT coalesce(sum(alert_count), 0) FROM spooled").fetchone()[0])

    @staticmethod
    def _pending(conn: sqlite3.Connection, max_alerts: int) -> list[Spooled]:
        found: list[Spooled] = []
        total = 0
        rows = conn.execute(
            "SELECT seq, batch_id, received_at, alert_count, body FROM spooled ORDER BY seq LIMIT ?",
            (max(max_alerts, 1),),
        )
        for seq, batch_id, received_at, count, body in rows:
            if found and total + count > max_alerts:
                break
            found.append(Spooled(int(seq), str(batch_id), str(received_at), int(count), bytes(body)))
            total += int(count)
        return found

    def _forget(self, through: int, rejected: list[tuple[Spooled, str]]) -> None:
        def run(conn: sqlite3.Connection) -> None:
            begin_immediate(conn)
            try:
                conn.executemany(
                    "INSERT OR IGNORE INTO rejected (seq, batch_id, received_at, body, error) VALUES (?, ?, ?, ?, ?)",
                    [(s.seq, s.batch_id, s.received_at, s.body, error) for s, error in rejected],
                )
                conn.execute("DELETE FROM spooled WHERE seq <= ?", (through,))
                conn.execute("DELETE FROM spooled_keys WHERE seq <= ?", (through,))
                conn.execute("COMMIT")
            # broad: BaseException so the transaction is rolled back whatever interrupted it (a cancel too); re-raised
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise

        self._guarded(run)

    def _reset(self) -> None:
        """Close the connections, then the file held (its flock): in this order, so that no connection of this
        process is left on a file others may set aside."""
        for conn in (self._conn, self._read):
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
        self._conn = self._read = None
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = self._held = None
        self._size = 0
