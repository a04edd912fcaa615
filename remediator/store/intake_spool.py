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
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from remediator.errors import StoreUnavailable
from remediator.store.db import BUSY_TIMEOUT_S
from remediator.store.sqlite_intake import begin_immediate, durable_connection, rows_for_keys, sqlite_time

__all__ = ["IntakeSpool", "Spooled", "prepare_spool", "spool_path"]

T = TypeVar("T")

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
    stops the controller at start rather than failing every webhook. Raises sqlite3.Error or OSError."""
    path = spool_path(database)
    conn = _connect(path)
    conn.close()
    return path


def _connect(path: Path) -> sqlite3.Connection:
    """The intake's kind of connection (fsynced commits), the spool's tables created if missing."""
    conn = durable_connection(path)
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


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
    """

    def __init__(self, path: Path, database: Path | None = None) -> None:
        self.path = path
        self._database = database
        self._conn: sqlite3.Connection | None = None
        self._read: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="remediator-spool")

    def exists(self) -> bool:
        return self.path.exists()

    async def open(self) -> None:
        """Create the spool file (and its tables) now, before the first webhook or the worker process."""
        await self._call(lambda: self._guarded(lambda conn: None))

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
        if not self.exists():
            return []
        return await self._call(self._pending, max_alerts)

    async def alert_count(self) -> int:
        """The alerts spooled and not yet moved (0 without a spool file)."""
        if not self.exists():
            return 0
        return await self._call(
            self._guarded,
            lambda conn: int(conn.execute("SELECT coalesce(sum(alert_count), 0) FROM spooled").fetchone()[0]),
        )

    async def forget(self, through: int, rejected: Sequence[tuple[Spooled, str]] = ()) -> None:
        """Remove the batches up to `through` (moved into the database); keep `rejected` ones apart."""
        await self._call(self._forget, through, list(rejected))

    async def close(self) -> None:
        if self._conn is not None or self._read is not None:
            await asyncio.get_running_loop().run_in_executor(self._thread, self._reset)
        self._thread.shutdown(wait=False)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = _connect(self.path)
        return self._conn

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

    def _guarded(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self._connection())
        except sqlite3.Error as exc:
            self._reset()
            raise StoreUnavailable(f"intake spool {self.path.name}: {exc}") from exc

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
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return repeats

        return self._guarded(run)

    def _pending(self, max_alerts: int) -> list[Spooled]:
        def run(conn: sqlite3.Connection) -> list[Spooled]:
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

        return self._guarded(run)

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
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        self._guarded(run)

    def _reset(self) -> None:
        for conn in (self._conn, self._read):
            if conn is not None:
                conn.close()
        self._conn = self._read = None
