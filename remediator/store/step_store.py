"""Step executions: begin (idempotent on resume), checkpoint progress, finish with output; read them back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from remediator.domain.json_values import JsonObject, jsonable
from remediator.domain.states import State, phase_of
from remediator.errors import StateMoved
from remediator.store.models import (
    StepRow,
)
from remediator.store.transactions import RepositoryBase

__all__ = ["WAITING", "BeginStep", "StepKey", "StepStore", "begin_step_in", "steps_begun"]

# A step row's progress key while the step waits to look again (it raised ResumeLater: a reboot not seen yet, a
# `wait` with time left, a gate with no verdict). The next look resumes the same step: it is not a new start, so
# it adds no `step.started` to the timeline (one entry for the whole wait, not one per poll) and no attempt.
WAITING = "waiting_to_look_again"


@dataclass(frozen=True)
class BeginStep:
    """A step to begin: its place in the playbook, its rendered parameters, and `progress`, what the action
    observed before its first write (`Action.observe`), stored only with a new row."""

    phase: str
    idx: int
    name: str
    action: str
    params: JsonObject
    progress: dict[str, Any] | None = None


StepKey = tuple[str, str, int]  # (remediation id, phase, index): one step row


async def steps_begun(session: AsyncSession, keys: Sequence[StepKey]) -> dict[StepKey, StepRow]:
    """The step rows that exist for `keys`, in one statement (an admission batch's first steps)."""
    if not keys:
        return {}
    wanted = set(keys)
    rows = await session.scalars(
        select(StepRow).where(StepRow.remediation_id.in_(sorted({rem_id for rem_id, _, _ in wanted})))
    )
    return {key: row for row in rows.all() if (key := (row.remediation_id, row.phase, row.idx)) in wanted}


async def begin_step_in(
    store: RepositoryBase, session: AsyncSession, rem_id: str, begin: BeginStep,
    *, begun: Mapping[StepKey, StepRow] | None = None,
) -> StepRow:
    """Create or resume the step row in `session` (the caller holds the remediation's row), audited as
    `step.started`: shared by `StepStore.begin_step` and an admission that begins the first step
    (`RemediationStore.admit_many`). `begun`: the rows `steps_begun` read for a batch, so that the step's row is
    not looked up again (a key missing from it has no row yet)."""
    if begun is not None:
        step = begun.get((rem_id, begin.phase, begin.idx))
    else:
        step = await session.scalar(
            select(StepRow).where(
                StepRow.remediation_id == rem_id, StepRow.phase == begin.phase, StepRow.idx == begin.idx
            )
        )
    resumed = step is not None
    looking_again = False
    if step is None:
        step = StepRow(
            remediation_id=rem_id, phase=begin.phase, idx=begin.idx, name=begin.name, action=begin.action,
            status="running", attempts=1, params=jsonable(begin.params), output={},
            progress=jsonable(begin.progress or {}), error=None, started_at=store.clock(),
        )
        session.add(step)
    else:
        progress = dict(step.progress or {})
        looking_again = bool(progress.pop(WAITING, False)) and step.status == "running" and (
            step.params == jsonable(begin.params)
        )
        if WAITING in (step.progress or {}):
            step.progress = jsonable(progress)  # the action reads its own progress, never this mark
        if not looking_again:
            step.attempts += 1
        step.status = "running"
        step.params = jsonable(begin.params)
    await session.flush()
    if looking_again:
        return step
    await store.audit(
        session, "step.started", remediation_id=rem_id,
        data={"phase": begin.phase, "step": begin.name, "action": begin.action, "index": begin.idx,
              "attempt": step.attempts, "resumed": resumed, "params": begin.params},
    )
    return step


class StepStore(RepositoryBase):
    """Step executions (a mixin of `Repository`)."""

    async def begin_step(
        self, rem_id: str, owner: str, *, phase: str, idx: int, name: str, action: str, params: JsonObject,
        progress: dict[str, Any] | None = None,
    ) -> StepRow:
        """Create or resume the step row; a resumed step keeps its saved progress and counts the attempt.

        `progress`: what the action observed before its first write (`Action.observe`), stored only with a
        new row: a resumed one keeps what it saved, which may predate writes of the earlier attempt."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            if rem.state not in ((State.PENDING, State.RUNNING) if phase == "forward" else (State.REVERTING,)):
                # A person moved it on (cancel, return) since the driver read it: this step no longer runs.
                raise StateMoved(rem_id)
            return await begin_step_in(
                self, session, rem_id, BeginStep(phase, idx, name, action, params, progress)
            )

    async def note_step_waiting(self, rem_id: str, owner: str, *, phase: str, idx: int) -> None:
        """The running step waits to look again (ResumeLater): mark its row so that the next look is not recorded
        as a new start (see WAITING). No audit event: the wait's reason is recorded where it changes."""
        async with self.transaction() as session:
            await self._get_for_update(session, rem_id, owner)
            step = await session.scalar(
                select(StepRow).where(StepRow.remediation_id == rem_id, StepRow.phase == phase, StepRow.idx == idx)
            )
            if step is not None and step.status == "running" and not (step.progress or {}).get(WAITING):
                step.progress = jsonable({**(step.progress or {}), WAITING: True})

    async def checkpoint_step(self, rem_id: str, owner: str, *, phase: str, idx: int, progress: dict[str, Any]) -> None:
        async with self.transaction() as session:
            await self._get_for_update(session, rem_id, owner)
            await session.execute(
                update(StepRow)
                .where(StepRow.remediation_id == rem_id, StepRow.phase == phase, StepRow.idx == idx)
                .values(progress=jsonable(progress))
            )

    async def note_gate_unknown(
        self, rem_id: str, owner: str, *, phase: str, idx: int, spell: Mapping[str, object], reason: str, changed: bool
    ) -> None:
        """A gate step reached no verdict: keep the spell (since, looks, agent) in the step's progress and, when
        `changed`, make `reason` the state reason with a `gate.unknown` audit event (once per spell or symptom,
        not once per look). The step stays running and the cursor where it is."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            step = await session.scalar(
                select(StepRow).where(StepRow.remediation_id == rem_id, StepRow.phase == phase, StepRow.idx == idx)
            )
            if step is not None:
                step.progress = jsonable({**(step.progress or {}), "gate_unknown": dict(spell)})
            if changed:
                rem.state_reason = reason
                rem.updated_at = self.clock()
                await self.audit(session, "gate.unknown", remediation_id=rem_id,
                                 data={"reason": reason, "phase": phase, "step": idx, **jsonable(dict(spell))})

    async def finish_step(
        self, rem_id: str, owner: str, *, phase: str, idx: int, name: str, action: str, status: str,
        output: Mapping[str, object] | None = None, error: str | None = None, advance: bool = True,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        """Record a step's result and move the cursor, with its audit event, in one transaction."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            step = await session.scalar(
                select(StepRow).where(StepRow.remediation_id == rem_id, StepRow.phase == phase, StepRow.idx == idx)
            )
            now = self.clock()
            if step is None:
                step = StepRow(
                    remediation_id=rem_id, phase=phase, idx=idx, name=name, action=action, status=status,
                    attempts=0, params={}, output={}, progress={}, started_at=now,
                )
                session.add(step)
            step.status = status
            step.output = jsonable(output or {})
            step.error = error
            step.finished_at = now
            if advance and phase_of(rem.state) == phase:  # not a forward step ending after a return began
                rem.current_step = idx + 1
            rem.updated_at = now
            rem.crashes = 0  # a recorded step result is progress: crash backoff starts over
            await self.audit(
                session, f"step.{status}", remediation_id=rem_id,
                data={"phase": phase, "step": name, "action": action, "index": idx, "error": error,
                      "output": output or {}, **(extra or {})},
            )

    async def steps(self, rem_id: str) -> list[StepRow]:
        async with self.transaction() as session:
            rows = await session.scalars(
                select(StepRow).where(StepRow.remediation_id == rem_id).order_by(StepRow.phase.desc(), StepRow.idx)
            )
            return list(rows.all())

    async def steps_for(self, rem_ids: list[str]) -> dict[str, list[StepRow]]:
        """Step rows of many remediations at once, in the order `steps` gives them."""
        found: dict[str, list[StepRow]] = {rem_id: [] for rem_id in rem_ids}
        async with self.transaction() as session:
            for start in range(0, len(rem_ids), 500):
                rows = await session.scalars(
                    select(StepRow)
                    .where(StepRow.remediation_id.in_(rem_ids[start:start + 500]))
                    .order_by(StepRow.remediation_id, StepRow.phase.desc(), StepRow.idx)
                )
                for row in rows.all():
                    found[row.remediation_id].append(row)
        return found

    async def steps_with_actions(self, actions: Sequence[str], limit: int = 5000) -> list[StepRow]:
        """The latest step rows of these actions, oldest first (the fleet view reads power caps in force)."""
        async with self.transaction() as session:
            rows = await session.scalars(
                select(StepRow).where(StepRow.action.in_(list(actions))).order_by(StepRow.id.desc()).limit(limit)
            )
            return list(reversed(rows.all()))
