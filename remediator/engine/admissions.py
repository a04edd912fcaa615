"""Admissions of one replica, taken to the store together.

Every admission holds the admission lock that orders quarantines across replicas (store:
`RemediationStore.admit_many`). One at a time, a storm's admissions queued on that lock, tens of transactions
waiting, each paying its round trips while holding it. Here a replica's drive tasks hand their admission
requests to one queue: while a batch is in the store, the requests that arrive wait, and go together in the
next batch (one transaction, one lock, decided oldest first as if one after another). A single admission on a
quiet controller goes at once, alone.
"""

from __future__ import annotations

import asyncio
import contextlib

from remediator.process.waiters import settle
from remediator.store.admission import Admission
from remediator.store.remediation_store import Admitted
from remediator.store.repository import Repository

__all__ = ["AdmissionQueue"]

MAX_BATCH = 64  # admissions in one transaction: bounds how long the admission lock is held at a time


class AdmissionQueue:
    """`await admit(request)` from any task; `await close()` when the replica stops."""

    def __init__(self, repo: Repository) -> None:
        self._repo = repo
        self._waiting: list[tuple[Admission, asyncio.Future[Admitted]]] = []
        self._task: asyncio.Task[None] | None = None

    async def admit(self, request: Admission) -> Admitted:
        """The request's result; its own error (lease lost) or the batch's (store unavailable) is raised."""
        future: asyncio.Future[Admitted] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="admissions")
        return await future

    async def _drain(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            batch = [(request, future) for request, future in batch if not future.done()]  # a cancelled waiter
            if not batch:
                continue
            try:
                results = await self._repo.admit_many([request for request, _ in batch])
            except Exception as exc:  # the store failed the whole batch: every waiter sees it
                for _, future in batch:
                    settle(future, exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                settle(future, result)

    async def close(self) -> None:
        """Let the batch in the store finish (its transaction commits or rolls back whole)."""
        if self._task is not None and not self._task.done():
            with contextlib.suppress(Exception):
                await self._task
