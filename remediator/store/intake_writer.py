"""Group commit for webhook batches: concurrent requests share one transaction, each still answered only
after its own batch is durably committed.

SQLite has one writer and every commit costs the same whatever it holds, so committing the batches that
arrived while the previous commit ran, together, multiplies ingest throughput under bursts (an Xid storm)
without weakening "200 only after the batch is stored". A failed group is retried batch by batch, so one
bad batch (or a dedup race with another replica) never fails its neighbours.
"""

from __future__ import annotations

import asyncio
import contextlib

from remediator.errors import StoreUnavailable
from remediator.intake.models import AlertmanagerPayload
from remediator.process.waiters import settle
from remediator.store.repository import Repository, StoredBatch

__all__ = ["IntakeWriter"]

_Item = tuple[AlertmanagerPayload, bytes | None, "asyncio.Future[StoredBatch]"]


class IntakeWriter:
    """Owns one background task per event loop; `submit` returns once the payload is committed."""

    def __init__(self, repo: Repository, *, max_group: int = 256) -> None:
        self._repo = repo
        self._max_group = max_group
        self._queue: asyncio.Queue[_Item] | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending = 0

    async def submit(self, payload: AlertmanagerPayload, body: bytes | None = None) -> StoredBatch:
        """Store `payload` (its raw `body`, when the intake spools it: store/intake_spool.py); once committed."""
        if self._queue is None or self._task is None or self._task.done():
            self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._run(self._queue), name="remediator-intake-writer")
        future: asyncio.Future[StoredBatch] = asyncio.get_running_loop().create_future()
        self._pending += 1
        self._repo.intake_idle.clear()
        try:
            await self._queue.put((payload, body, future))
            return await future
        finally:
            self._pending -= 1
            if not self._pending:
                self._repo.intake_idle.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None
        self._queue = None

    async def _run(self, queue: asyncio.Queue[_Item]) -> None:
        while True:
            group = [await queue.get()]
            while len(group) < self._max_group and not queue.empty():
                group.append(queue.get_nowait())
            live = [(p, b, f) for p, b, f in group if not f.done()]
            if live:
                await self._commit(live)

    async def _commit(self, group: list[_Item]) -> None:
        try:
            stored = await self._repo.store_batches([p for p, _, _ in group], [b for _, b, _ in group])
        except StoreUnavailable as exc:
            if len(group) == 1:
                settle(group[0][2], exc)
                return
            for payload, body, future in group:  # isolate the batch that failed the group
                try:
                    settle(future, (await self._repo.store_batches([payload], [body]))[0])
                except StoreUnavailable as single:
                    settle(future, single)
            return
        # broad: whatever storing the group raises (an error the classifier left alone, a bug), every waiting webhook is
        # settled with StoreUnavailable (503), none left hanging
        except Exception as exc:
            for _, _, future in group:
                settle(future, StoreUnavailable(f"{type(exc).__name__}: {exc}"))
            return
        for (_, _, future), result in zip(group, stored, strict=True):
            settle(future, result)
