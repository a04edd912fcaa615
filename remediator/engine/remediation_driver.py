"""Driving one remediation while this replica holds its lease: the loop, the lease, waits and crashes.

Each loop iteration re-reads the remediation from the store, does exactly one thing (admit, one step, one
return step, or a final transition) and records it with its audit event before the next. A crash anywhere
leaves the cursor at the step in flight; on resume that step runs again, which is safe because every
action is idempotent and long actions (drain) checkpoint their progress.

Anything that escapes a step's error boundary is a crash: recorded on the remediation, backed off
exponentially (persisted, so a restart keeps it), and after MAX_CRASHES in a row the remediation is `failed`
with the error's last line. A dependency that fails outside a step's retries is not a crash: the remediation
waits for it (`waiting: ...` in its state reason) and runs the same step again later.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from remediator.domain.states import State
from remediator.engine.moves import entered
from remediator.engine.mutation_audit import acting_remediation
from remediator.engine.step_lifecycle import PreparedStep
from remediator.engine.step_stages import failure_reason, last_line
from remediator.errors import IllegalTransition, LeaseLost, StateMoved, StoreUnavailable
from remediator.process.logs import log_fields
from remediator.retrying import WAITING_PREFIX, DependencyWaiting, is_transient
from remediator.store.models import Remediation

if TYPE_CHECKING:
    from remediator.engine.executor import Executor

__all__ = ["drive", "remediation_log_fields"]

log = logging.getLogger(__name__)


def remediation_log_fields(rem: Remediation) -> dict[str, str]:
    """What every log record names while this remediation is driven (remediator/process/logs.py)."""
    fields = {"remediation": rem.id, "node": rem.node, "gpu": rem.gpu_uuid or rem.gpu_index, "rule": rem.rule}
    return {k: str(v) for k, v in fields.items() if v}


async def drive(executor: Executor, rem_id: str, claimed: Remediation | None = None) -> None:
    """Advance one remediation until it waits, finishes or loses its lease; always release the lease.

    `claimed` is the row as the claiming transaction left it, used instead of reading it again."""
    rt = executor.rt
    acting_remediation.set(rem_id)
    log_fields.set({"remediation": rem_id})  # this task's records name the remediation (remediator/process/logs.py)
    renewer = asyncio.create_task(_renew(executor, rem_id))
    next_run: timedelta | None = None
    # As the claiming, then the admitting, transaction left it: no need to read it again.
    known: Remediation | None = claimed if claimed is not None and claimed.id == rem_id else None
    admitted = False  # the admission just passed: it read the pause flag under its lock a moment ago
    begun: PreparedStep | None = None  # the first step, begun by that admission
    try:
        while True:
            await rt.repo.intake_first()
            rem, known = known or await rt.repo.get(rem_id), None
            if rem is None or rem.lease_owner != rt.owner:
                return
            log_fields.set(remediation_log_fields(rem))
            if rem.state in (State.PENDING, State.HELD):
                started = await executor._admit(rem)
                if started is None:
                    next_run = rt.settings.held_recheck_interval
                    return
                (known, begun), admitted = started, True
            elif rem.state == State.RUNNING:
                later = await executor._forward(rem, admitted=admitted, begun=begun)
                admitted, begun = False, None
                await _dependency_back(executor, rem)
                if later is not None:  # the step asked to run again later (e.g. `wait`)
                    next_run = later
                    return
                if rt.crowded:  # others wait for a slot: continue after them (Runtime.crowded)
                    next_run = timedelta(0)
                    return
            elif rem.state == State.REVERTING:
                later = await executor._revert(rem)
                await _dependency_back(executor, rem)
                if later is not None:  # paused before a mutating undo step
                    next_run = later
                    return
            else:
                return
    except StateMoved:
        log.info("remediation %s was moved on by a person while driven; it goes on from its new state", rem_id)
    except LeaseLost:
        log.warning("lease on remediation %s lost; another replica continues it", rem_id)
    except StoreUnavailable:
        raise
    except IllegalTransition as exc:
        # A person's move (cancel, return) committed between this driver's read and its own move.
        fresh = await rt.repo.get(rem_id)
        if fresh is None or fresh.state == exc.state:
            await _crashed(executor, rem_id, exc)
        else:
            log.info("remediation %s moved to %s while driven; it goes on from there", rem_id, fresh.state)
    except DependencyWaiting as waiting:
        next_run = await _waiting(executor, rem_id, waiting)
    except Exception as exc:  # anything else that escaped a step's boundary: a dependency's wait, or a crash
        if is_transient(exc):  # a dependency failed outside a step's retries: wait for it, not a crash
            next_run = await _waiting(executor, rem_id, DependencyWaiting(exc, rt.clock()))
        else:
            await _crashed(executor, rem_id, exc)
    finally:
        renewer.cancel()
        await rt.repo.release_lease(rem_id, rt.owner, next_run_in=next_run)


async def _waiting(executor: Executor, rem_id: str, waiting: DependencyWaiting) -> timedelta | None:
    """The remediation waits for a dependency: its state reason says which and since when (once), and it
    runs again from the same step after `dependency_recheck_s`. Nothing is failed or counted as a crash."""
    rt = executor.rt
    try:
        changed = await rt.repo.note_dependency_waiting(rem_id, rt.owner, waiting.reason, waiting.dependency)
    except LeaseLost:
        return None
    if changed:
        log.warning("remediation %s %s; last error: %s", rem_id, waiting.reason, failure_reason(waiting.error))
    return timedelta(seconds=rt.settings.dependency_recheck_s)


async def _dependency_back(executor: Executor, rem: Remediation) -> None:
    """A step went through after the remediation waited for a dependency: its reason stops saying so."""
    if (rem.state_reason or "").startswith(WAITING_PREFIX):
        await executor.rt.repo.note_dependency_back(rem.id, executor.rt.owner)
        rem.state_reason = None


async def _crashed(executor: Executor, rem_id: str, exc: Exception) -> None:
    """Record a crash with its backoff (or end the remediation `failed`); one log line per crash."""
    rt = executor.rt
    settings = rt.settings
    error = last_line(exc)
    try:
        crashes, not_before = await rt.repo.record_crash(
            rem_id, rt.owner, error=error, backoff=settings.crash_backoff,
            backoff_max=settings.crash_backoff_max, max_crashes=settings.max_crashes,
        )
    except LeaseLost:
        log.error("remediation %s crashed after losing its lease: %s", rem_id, error, exc_info=exc)
        return
    if not_before is not None:
        log.error("remediation %s crashed (%d of %d); not retried before %s", rem_id, crashes,
                  settings.max_crashes, not_before.isoformat(), exc_info=exc)
        return
    log.error("remediation %s crashed %d times in a row; now failed: %s", rem_id, crashes, error, exc_info=exc)
    rem = await rt.repo.get(rem_id)  # record_crash has moved it (event `crash`) to `failed`
    if rem is not None:
        await entered(rt, rem, f"crashed {crashes} times: {error}")


async def _renew(executor: Executor, rem_id: str) -> None:
    """Keep this replica's lease on the remediation while it is driven (a third of the lease each time)."""
    lease = executor.rt.settings.lease_duration
    while True:
        await asyncio.sleep(lease.total_seconds() / 3)
        if not await executor.rt.repo.renew_lease(rem_id, executor.rt.owner, lease):
            return
