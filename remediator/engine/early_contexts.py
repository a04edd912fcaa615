"""Contexts read while the deciding transaction commits, for the remediations an idle worker is handed.

A new remediation's first Kubernetes reads (its node, the pods on it, their owners, the sidecar's GPU pods)
used to start only after the decision was committed and the drive began: about as long again as the
deciding transaction, on the path from the webhook to the taint. The decision already knows each new
remediation's target and alert labels, so an idle worker starts reading their contexts before it records
the batch, and the drive takes the finished read instead of starting one. Reads for alerts the transaction
did not start (linked to an active remediation, cooled down, or past the lease's limit) are cancelled.
A read that failed is not kept: the drive reads again, where a failure counts as it always has; a transient
failure (a 429 with its Retry-After, a 5xx, a refused connection) reaches the drive's retry policy first, so
the read again waits as long as the API server asked (remediator/retrying.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Coroutine
from typing import Any

from remediator.actions.context import Gathered
from remediator.retrying import is_transient

__all__ = ["ContextPrefetch"]

log = logging.getLogger(__name__)


class ContextPrefetch:
    """Context reads in flight, by the id of the alert whose remediation they are for."""

    def __init__(self) -> None:
        self._reads: dict[int, asyncio.Task[Gathered]] = {}

    def start(self, alert_id: int, read: Coroutine[Any, Any, Gathered]) -> None:
        """Start reading the context of the remediation alert `alert_id` may start."""
        old = self._reads.pop(alert_id, None)
        if old is not None:
            old.cancel()
        self._reads[alert_id] = asyncio.ensure_future(read)

    def keep(self, alert_ids: Collection[int]) -> None:
        """Cancel the reads for every alert but these (the alerts of the remediations the batch started)."""
        for alert_id in [a for a in self._reads if a not in alert_ids]:
            self._reads.pop(alert_id).cancel()

    async def take(self, alert_id: int | None) -> Gathered | None:
        """The context read for `alert_id`'s remediation, or None (none started, or the read failed)."""
        read = self._reads.pop(alert_id, None) if alert_id is not None else None
        if read is None:
            return None
        try:
            return await read
        except asyncio.CancelledError:
            if not read.cancelled():
                raise  # the drive itself was cancelled
            return None
        # broad: only a read-ahead; any failure (cluster, node agent, a bug) is read again by the drive, transient ones
        # re-raised so it waits
        except Exception as exc:
            if is_transient(exc):
                raise
            log.debug("context read ahead for alert %s failed; read again", alert_id, exc_info=True)
            return None

    def __len__(self) -> int:
        return len(self._reads)

    async def close(self) -> None:
        """Cancel every read still in flight and wait for them to end."""
        reads, self._reads = list(self._reads.values()), {}
        for read in reads:
            read.cancel()
        for read in reads:
            with contextlib.suppress(BaseException):
                await read
