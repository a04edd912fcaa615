"""The webhook intake's fast path on SQLite: one group of batches, one thread hop, one transaction.

Through the async driver every statement is a round trip to a worker thread and back to the event loop;
for the hottest write of the controller that costs more than SQLite itself. Here the whole group commit
(dedup lookup, batch rows, alert rows) runs in a single call on a dedicated thread with its own sqlite3
connection, writing exactly the columns and formats the ORM reads back (UTC timestamps, JSON text).

"Stored" means on disk: the intake connection runs with `synchronous=FULL`, so in WAL mode every commit
fsyncs the log before the webhook is answered, and a batch acknowledged just before a power cut survives it
(`NORMAL` only protects against a process crash). bench/ingest.py measures what that costs.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

from remediator.errors import StoreUnavailable
from remediator.store.db import BUSY_TIMEOUT_S
from remediator.store.intake_repeats import as_repeats
from remediator.store.intake_rows import AlertValues, BatchValues

__all__ = ["INTAKE_SYNCHRONOUS", "Build", "SqliteIntake", "begin_immediate", "durable_connection", "rows_for_keys",
           "sqlite_time"]

# The intake's durability: FULL fsyncs every commit. (bench/ingest.py sets NORMAL to measure the difference.)
INTAKE_SYNCHRONOUS = "FULL"
# How the intake waits for SQLite's write lock while another process holds it (the worker process): short
# retries, not SQLite's busy handler, whose sleeps grow to 100 ms (a webhook would wait out the last one).
LOCK_RETRY_S = 0.0005
_KEYS_PER_QUERY = 500  # bound parameters per IN (...), well under SQLite's limit

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
# build(existing dedup keys) -> (batch rows, alert rows, result to return)
Build = Callable[[dict[str, int]], tuple[list[BatchValues], list[AlertValues], T]]

Params = tuple[object, ...]  # one row's bound parameters, in the order of its columns

_BATCH_COLUMNS = (
    "id", "received_at", "receiver", "status", "group_key", "external_url", "truncated_alerts", "alert_count",
    "repeat_count",
)
_ALERT_COLUMNS = (
    "batch_id", "fingerprint", "alertname", "status", "starts_at", "ends_at", "labels", "annotations",
    "generator_url", "received_at", "dedup_key", "repeat_of", "state",
)


def sqlite_time(value: datetime | None) -> str | None:
    """The text SQLAlchemy's SQLite DateTime stores (naive UTC, microseconds)."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(" ", "microseconds")


def _insert(table: str, columns: Sequence[str]) -> str:
    # Table and column names are the module's constants; values are always bound parameters.
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"  # noqa: S608


_INSERT_BATCH = _insert("alert_batches", _BATCH_COLUMNS)
_INSERT_ALERT = _insert("alerts", _ALERT_COLUMNS)
# A first delivery raced by another writer is skipped here and stored again as a repeat (store/intake_repeats.py).
_INSERT_FIRST = _INSERT_ALERT + " ON CONFLICT (dedup_key) DO NOTHING"
_ADD_REPEATS = "UPDATE alert_batches SET repeat_count = repeat_count + ? WHERE id = ?"


class SqliteIntake:
    """Owns one sqlite3 connection used only from its own thread."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="remediator-intake")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = durable_connection(self._path)
            self._conn.execute("PRAGMA foreign_keys=ON")
        return self._conn

    async def existing_and_insert(self, keys: Sequence[str], build: Build[T]) -> tuple[T, dict[str, int]]:
        """Look up known dedup keys, let `build(existing)` make the rows, insert them: one transaction.

        Returns build's result and the extra repeats per batch id: first deliveries another writer stored
        between the lookup and the insert, stored here as repeats of that writer's rows.

        The thread only runs SQLite (which releases the GIL); turning payloads into row tuples happens on
        the event loop, so the two never fight over the GIL in the middle of a commit.
        """
        existing = await self._call(self._begin_and_lookup, keys)
        extra: dict[str, int] = {}
        try:
            batches, alerts, result = build(existing)
            batch_rows = [_params(b, _BATCH_COLUMNS) for b in batches]
            first = [a for a in alerts if a["dedup_key"] is not None]
            other = [a for a in alerts if a["dedup_key"] is None]
            first_rows = [_params(a, _ALERT_COLUMNS) for a in first]
            other_rows = [_params(a, _ALERT_COLUMNS) for a in other]
            lost = await self._call(self._insert_and_commit, batch_rows, first_rows, other_rows)
            if lost:
                repeats, extra = as_repeats(first, lost)
                repeat_rows = [_params(a, _ALERT_COLUMNS) for a in repeats]
                await self._call(self._insert_repeats_and_commit, repeat_rows, extra)
        # broad: BaseException so the open transaction is rolled back whatever interrupted the batch (a cancel too); re-
        # raised
        except BaseException:
            await self._call(self._rollback)
            raise
        return result, extra

    async def _call(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    def _guarded(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self._connection())
        except sqlite3.IntegrityError as exc:
            raise StoreUnavailable(f"the batch could not be stored: {exc}") from exc
        except sqlite3.Error as exc:
            self._reset()
            raise StoreUnavailable(str(exc)) from exc

    def _begin_and_lookup(self, keys: Sequence[str]) -> dict[str, int]:
        def run(conn: sqlite3.Connection) -> dict[str, int]:
            begin_immediate(conn)
            found = rows_for_keys(conn, "SELECT dedup_key, id FROM alerts WHERE dedup_key IN ({marks})", keys)
            return {str(k): int(v) for k, v in found}

        return self._guarded(run)

    def _insert_and_commit(
        self, batches: list[Params], first: list[Params], other: list[Params]
    ) -> dict[str, int]:
        """Insert and commit; when the database skipped first deliveries, leave the transaction open and
        return their dedup keys with the ids of the rows holding them."""

        def run(conn: sqlite3.Connection) -> dict[str, int]:
            conn.executemany(_INSERT_BATCH, batches)
            inserted = conn.executemany(_INSERT_FIRST, first).rowcount if first else 0
            conn.executemany(_INSERT_ALERT, other)
            if inserted < len(first):
                key_at, batch_at = _ALERT_COLUMNS.index("dedup_key"), _ALERT_COLUMNS.index("batch_id")
                lost: dict[str, int] = {}
                for row in first:
                    found = conn.execute("SELECT id, batch_id FROM alerts WHERE dedup_key = ?", (row[key_at],))
                    alert_id, batch_id = found.fetchone()
                    if batch_id != row[batch_at]:  # held by another delivery's row
                        lost[str(row[key_at])] = int(alert_id)
                if lost:
                    return lost
            conn.execute("COMMIT")
            return {}

        return self._guarded(run)

    def _insert_repeats_and_commit(self, repeats: list[Params], extra: dict[str, int]) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(_INSERT_ALERT, repeats)
            conn.executemany(_ADD_REPEATS, [(count, batch_id) for batch_id, count in extra.items()])
            conn.execute("COMMIT")

        self._guarded(run)

    def _rollback(self) -> None:
        if self._conn is not None and self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                self._reset()

    def _reset(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._reset)
        self._thread.shutdown(wait=False)


def durable_connection(path: str | Path, *, uri: bool = False) -> sqlite3.Connection:
    """A connection for the intake's own thread: WAL, fsynced commits (INTAKE_SYNCHRONOUS), autocommit mode,
    and no busy handler (`begin_immediate` waits for the write lock itself). `uri`: `path` is a file: URI."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False, uri=uri)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=" + ("NORMAL" if INTAKE_SYNCHRONOUS == "NORMAL" else "FULL"))
        conn.execute("PRAGMA busy_timeout=0")
    # broad: BaseException so the connection is closed whatever interrupted setting it up; re-raised
    except BaseException:
        conn.close()
        raise
    return conn


def rows_for_keys(conn: sqlite3.Connection, query: str, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """The rows of `query` (its `{marks}` the placeholders of an `IN (...)`) for `keys`, a chunk at a time."""
    rows: list[tuple[Any, ...]] = []
    for i in range(0, len(keys), _KEYS_PER_QUERY):
        chunk = list(keys[i : i + _KEYS_PER_QUERY])
        # The query is one of the store's constants; the keys are always bound parameters.
        rows.extend(conn.execute(query.format(marks=", ".join("?" for _ in chunk)), chunk))
    return rows


def begin_immediate(conn: sqlite3.Connection) -> None:
    """BEGIN IMMEDIATE, retried every LOCK_RETRY_S while another connection writes (up to BUSY_TIMEOUT_S).

    Within one process the writers take turns before they reach SQLite (`RepositoryBase`'s gate); a worker
    in its own process meets the intake only here. Retrying this often, the intake takes the lock within
    about half a millisecond of its release, and so goes first whenever it waits.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if conn.in_transaction or "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(LOCK_RETRY_S)


def _value(value: object) -> object:
    if isinstance(value, datetime):
        return sqlite_time(value)
    if isinstance(value, dict):
        return json.dumps(value)
    return value


def _params(values: Mapping[str, object], columns: Sequence[str]) -> Params:
    """A row's bound parameters in the order of `columns` (times as SQLAlchemy stores them, mappings as JSON)."""
    return tuple(_value(values[c]) for c in columns)

