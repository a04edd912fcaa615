"""What the node watch tells the engine about held nodes: a person's hand change, and a reboot.

A person who uncordons a quarantined node or removes its taint (`kubectl uncordon`, `kubectl edit`, `kubectl
patch`, a JSON patch of `spec.taints`) has overruled the controller. The node watch (adapters/node_watch.py)
hands every node object it sees to `NodeMarks.seen`, which keeps, per node, only what matters here (cordoned,
its taints, boot ID, Ready) and notices at once when a cordon or a taint went away, or the node came back
Ready from a new boot. No poll: the watch is already open for the inventory.

A lifted mark is looked up against the remediations holding that node (store: `holding_node`). It is the
controller's own write, and ignored, when
- the field it lives in (`spec.unschedulable`, `spec.taints`) is owned now by the controller's field
  manager (`remediator`) in metadata.managedFields;
- the remediation's own undo is under way (reverting past its return gate) or lifted that mark (an undo that
  then failed), or one of its own forward steps lifts it (reset-gpu untaints after a good reset);
- the step only described the mark (a dry run's `succeeded` step places nothing).
Otherwise it was done by hand: the remediation is let go (`released`, domain/states.py) in one transaction
with the audit event `node.changed_by_hand` (the node, what was lifted, the field manager that owns the
changed field now, its operation and time: Kubernetes records a manager only for the fields a write set,
so a removal of the whole field leaves none, and never the user: that is in the API server's audit log).
The drive in flight on this replica is stopped, the breaker stops counting the node, and the project's
marks (the `remediator.io/state` label and `remediator.io/remediation` annotation, where still this
remediation's) and its node condition (through the condition step's own undo) are cleaned up. Nothing is
applied again: the cordon and the taints stay as the person left them. A repeat delivery of the same alert
is a repeat (it never starts work); a new fault starts a new remediation, subject to the cooldown.

Durable, whatever the database does: the watch records a node's new marks before the check runs, so a check
the store could not answer (StoreUnavailable: PostgreSQL away, the SQLite file locked) would be lost with it.
Such a failure makes a reconcile owed instead, retried with backoff (STORE_RETRY_S) until the store answers.
The reconcile compares every remediation that holds a node (`holding_nodes`) with the node's marks as the
watch last saw them; a mark of its that is gone is checked, exactly as above, against the node read now (its
managedFields). It runs as well after each full list of the nodes (the first at start-up: a hand change made
while no controller ran is noticed there; and after a 410) and at a bookmark, at most once every
RECONCILE_EVERY_S.

A node Ready with a boot ID other than the last one seen makes the remediations on it that wait on a
timer due at once (`wake_after_reboot`), so a return gate waiting for the reboot goes on within the watch's
latency instead of at its next 30 s look (bench/reboot_wake.py). REBOOT_WATCH_WAKE=false turns it off.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remediator.actions.node import DEFAULT_TAINT_KEY, unmark_patch
from remediator.adapters.kube import FIELD_MANAGER
from remediator.definitions.templates import render_params
from remediator.domain.plan_snapshot import playbook_of
from remediator.domain.states import State
from remediator.engine.executor import Executor
from remediator.engine.moves import entered
from remediator.engine.mutation_audit import acting_remediation
from remediator.engine.planning import stored_variables
from remediator.engine.return_to_service import revert_plan
from remediator.errors import RemediatorError, StoreUnavailable
from remediator.kube.views import Body, Node
from remediator.retrying import Backoff
from remediator.store.models import Remediation, StepRow

__all__ = ["RECONCILE_EVERY_S", "STORE_RETRY_S", "Lifted", "Marks", "NodeMarks", "field_owner", "marks_of"]

log = logging.getLogger(__name__)

RECONCILE_EVERY_S = 30.0  # a bookmark reconciles at most this often (a full list always does)
STORE_RETRY_S = (0.5, 10.0)  # backoff (first, cap) of an owed reconcile while the store does not answer

# Forward steps whose action lifts a mark of the same remediation (the playbook lifts its own quarantine).
_LIFTS = {"cordon": "uncordon", "drain": "uncordon", "taint": "untaint"}
# Undo actions run to clean up after a release: the project's labels, annotations and condition (the marks the
# cordon and taint steps add are cleaned directly); never uncordon or untaint.
_CLEANUP = frozenset({"clear_node_condition", "unlabel", "unannotate"})


@dataclass(frozen=True, slots=True)
class Marks:
    """What the engine keeps of a node between watch events."""

    unschedulable: bool
    taints: frozenset[tuple[str, str]]
    boot_id: str
    ready: bool


def marks_of(node: Mapping[str, object]) -> Marks:
    view = Node(node)
    taints = frozenset((t.key or "", t.effect or "") for t in view.taints)
    return Marks(view.unschedulable, taints, view.boot_id or "", view.ready)


@dataclass(frozen=True)
class Lifted:
    """One mark a remediation put on its node that is gone now."""

    step: str
    action: str
    what: str  # "cordon" or "taint KEY:EFFECT"
    field: str  # spec.unschedulable or spec.taints


def field_owner(node: Mapping[str, object], field: str) -> dict[str, Any] | None:
    """The managedFields entry that owns `field` (`spec.unschedulable`, `spec.taints`) now, if any: its
    manager, operation and time."""
    parts = [f"f:{p}" for p in field.split(".")]
    for entry in Body(node).metadata.managed_fields:
        tree: object = entry.get("fieldsV1") or {}
        for part in parts:
            tree = tree.get(part) if isinstance(tree, Mapping) else None
            if tree is None:
                break
        if tree is not None:
            return {"manager": entry.get("manager"), "operation": entry.get("operation"), "time": entry.get("time")}
    return None


def lifted_marks(marks: Marks, rows: list[StepRow]) -> list[Lifted]:
    """The marks this remediation's succeeded forward steps put on the node that are no longer there."""
    gone: list[Lifted] = []
    for row in rows:
        if row.phase != "forward" or row.status != "succeeded" or row.action not in _LIFTS:
            continue
        if (row.output or {}).get("dry_run") or (row.output or {}).get("planned"):
            continue  # a dry run's step described the mark and placed none: there is nothing to lift
        if row.action == "taint":
            key = str(row.params.get("key") or DEFAULT_TAINT_KEY)
            effect = str(row.params.get("effect") or "NoSchedule")
            if (key, effect) not in marks.taints:
                gone.append(Lifted(row.name, row.action, f"taint {key}:{effect}", "spec.taints"))
        elif not marks.unschedulable:
            gone.append(Lifted(row.name, row.action, "cordon", "spec.unschedulable"))
    return gone


def _own_lift(rows: list[StepRow], lifted: Lifted, after: int) -> bool:
    """The same remediation lifts this mark itself (begun or done): a later forward step, or a step of its undo
    (a reconcile may look long after an undo that lifted the taint and then failed at the uncordon)."""
    undo = _LIFTS[lifted.action]
    return any(
        r.action == undo and r.status in ("running", "succeeded") and (r.phase != "forward" or r.idx > after)
        for r in rows
    )


def _lifted_by_others(marks: Marks, rows: list[StepRow]) -> list[Lifted]:
    """The remediation's marks that are gone and that none of its own forward steps lifted."""
    by_name = {r.name: r for r in rows if r.phase == "forward"}
    return [mark for mark in lifted_marks(marks, rows) if not _own_lift(rows, mark, by_name[mark.step].idx)]


class NodeMarks:
    """Fed by the node watch (`seen`, synchronous and cheap); acts in tasks of its own.

    `stop(rem_id)` stops this replica's drive of a remediation that was let go; `wake()` runs the worker loop.
    """

    def __init__(
        self, executor: Executor, *, stop: Callable[[str], None], wake: Callable[[], None], reboot_wake: bool = True,
        reconcile_every: float = RECONCILE_EVERY_S,
    ) -> None:
        self.executor = executor
        self.rt = executor.rt
        self.stop = stop
        self.wake = wake
        self.reboot_wake = reboot_wake
        self._marks: dict[str, Marks] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._checking: dict[str, asyncio.Lock] = {}
        self.reconcile_every = reconcile_every
        self._reconciler: asyncio.Task[None] | None = None
        self._reconcile_due = False  # a reconcile was asked for (or is owed) and has not run since
        self._reconciled_at: float | None = None  # loop time of the last reconcile begun

    def seen(self, kind: str, node: Mapping[str, object]) -> None:
        name = Body(node).name or ""
        if not name:
            return
        if kind == "DELETED":
            self._marks.pop(name, None)
            return
        new = marks_of(node)
        old = self._marks.get(name)
        self._marks[name] = new
        if old is None:
            return
        if (old.unschedulable and not new.unschedulable) or old.taints - new.taints:
            self._spawn(self.check_lifted(name, node), f"hand-change-{name}")
        rebooted = new.ready and new.boot_id and (new.boot_id != old.boot_id or not old.ready)
        if rebooted and self.reboot_wake:
            self._spawn(self.rebooted(name), f"reboot-wake-{name}")

    def resynced(self, kind: str) -> None:
        """The watch listed every node (`LISTED`: start-up, after a 410) or sent a bookmark (`BOOKMARK`): compare
        the held nodes with their marks; after a bookmark at most once every `reconcile_every` seconds."""
        now = asyncio.get_running_loop().time()
        if kind == "BOOKMARK" and self._reconciled_at is not None and now - self._reconciled_at < self.reconcile_every:
            return
        self.request_reconcile()

    def request_reconcile(self) -> None:
        """Run a reconcile soon: one runs at a time, and a request made while it runs runs it once more."""
        self._reconcile_due = True
        if self._reconciler is None or self._reconciler.done():
            self._reconciler = self._spawn(self._reconcile_until_done(), "hand-change-reconcile")

    async def _reconcile_until_done(self) -> None:
        backoff = Backoff(*STORE_RETRY_S)
        while self._reconcile_due:
            self._reconcile_due = False
            self._reconciled_at = asyncio.get_running_loop().time()
            try:
                released = await self.reconcile()
            except StoreUnavailable as exc:
                self._reconcile_due = True  # owed until the store answers
                wait = backoff.next(exc)
                log.warning("hand changes: the store is unavailable (%s); held nodes are compared with their marks "
                            "again in %.1f s", exc, wait)
                await asyncio.sleep(wait)
                continue
            backoff.reset()
            if released:
                log.info("hand changes: %d remediation(s) released whose marks were lifted unseen", released)

    def _spawn(self, work: Any, name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("node watch consumer failed", exc_info=task.exception())

    async def idle(self) -> None:
        """Wait until every check started so far has finished (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def rebooted(self, node: str) -> None:
        woken = await self.rt.repo.wake_after_reboot(node)
        if woken:
            log.info("node %s is Ready from a new boot: %d remediation(s) on it look again now", node, woken)
            self.wake()

    async def check_lifted(self, node: str, seen: Mapping[str, Any]) -> None:
        """A cordon or taint went away on `node`: release each remediation whose mark a person lifted. When the
        store does not answer, a reconcile is owed (retried until it does): the watch has moved on."""
        try:
            async with self._checking.setdefault(node, asyncio.Lock()):  # events close together: one at a time
                for rem in await self.rt.repo.holding_node(node):
                    await self._check(rem, seen)
        except StoreUnavailable as exc:
            log.warning("hand change on node %s not recorded yet: the store is unavailable (%s); retried until it "
                        "answers", node, exc)
            self.request_reconcile()

    async def reconcile(self) -> int:
        """Compare every remediation that holds a node with the node's marks as the watch last saw them; where a
        mark of its is gone, check the node as read now (managedFields) for a hand change. A node the watch has
        not seen is left to its list and events. Returns how many remediations were released."""
        held = await self.rt.repo.holding_nodes()
        if not held:
            return 0
        steps = await self.rt.repo.steps_for([rem.id for rem in held])
        released = 0
        for rem in held:
            marks = self._marks.get(rem.node or "")
            if marks is None or not _lifted_by_others(marks, steps[rem.id]):
                continue
            node = await self._read_node(rem.node or "")
            if node is None:
                continue
            async with self._checking.setdefault(rem.node or "", asyncio.Lock()):
                released += await self._check(rem, node, steps[rem.id])
        return released

    async def _read_node(self, name: str) -> Mapping[str, object] | None:
        kube = self.rt.kube
        if kube is None:
            return None
        try:
            return await kube.get_node(name)
        except RemediatorError as exc:  # gone, or the API server is away: the next list or bookmark looks again
            log.warning("hand changes: cannot read node %s to compare its marks: %s", name, exc)
            return None

    async def _check(self, rem: Remediation, node: Mapping[str, object], rows: list[StepRow] | None = None) -> bool:
        """Release `rem` when a mark of its is gone from `node` and was lifted by someone other than the
        controller; True when it was."""
        if rem.state == State.REVERTING and rem.current_step >= len(playbook_of(rem).return_gate):
            return False  # its own undo lifts the marks
        if rows is None:
            rows = await self.rt.repo.steps(rem.id)
        lifted = _lifted_by_others(marks_of(node), rows)
        owners = {mark.field: field_owner(node, mark.field) for mark in lifted}
        lifted = [mark for mark in lifted if (owners[mark.field] or {}).get("manager") != FIELD_MANAGER]
        lifted = list({mark.what: mark for mark in lifted}.values())  # a drain's cordon is the cordon step's too
        if not lifted:
            return False
        owner = next((o for o in (owners[m.field] for m in lifted) if o), None)
        manager = str(owner["manager"]) if owner else None
        meta = Body(node).metadata
        data: dict[str, Any] = {
            "node": rem.node, "lifted": [m.what for m in lifted], "fields": sorted({m.field for m in lifted}),
            "field_manager": manager, "operation": owner.get("operation") if owner else None,
            "changed_at": owner.get("time") if owner else None, "resource_version": meta.resource_version,
            "by_hand": True,
        }
        if owner is None:
            data["note"] = ("the change removed the field, and Kubernetes records no field manager for a removal; "
                            "the API server's audit log names who made it")
        actor = f"hand:{manager}" if manager else "hand"
        reason = (f"{' and '.join(m.what for m in lifted)} lifted by hand"
                  f"{f' ({manager})' if manager else ''}; the controller lets go of node {rem.node}")
        released = await self.rt.repo.release_by_hand(
            rem.id, expected_state=rem.state, reason=reason, actor=actor, data=data
        )
        if released is None:
            return False
        log.warning("remediation %s released: %s", rem.id, reason)
        self.stop(rem.id)
        cleaned = await self._clean_up(released, rows)
        if cleaned:
            await self.rt.repo.record_audit("node.cleaned_up", remediation_id=rem.id, data={
                "node": rem.node, "cleaned": cleaned})
        await entered(self.rt, released, reason)
        await self.rt.repo.wake_held()  # quarantine room freed
        self.wake()
        return True

    async def _clean_up(self, rem: Remediation, rows: list[StepRow]) -> list[str]:
        """Remove the project's marks (where still this remediation's) and undo its condition; never the cordon
        or the taints. Best effort: a failure is logged and audited, and leaves the rest to a person."""
        kube = self.rt.kube
        if kube is None or not rem.node:
            return []
        cleaned: list[str] = []
        token = acting_remediation.set(rem.id)  # the writes are audited as this remediation's
        try:
            for undo in revert_plan(self.rt.actions, playbook_of(rem), rows):
                action = self.rt.actions.get(undo.action)
                if undo.action not in _CLEANUP or action is None:
                    continue
                params = undo.params
                if undo.templated:
                    params = render_params(undo.params, stored_variables(rem, rows))
                ctx = self.executor.context_for(rem, f"release:{undo.forward.name}", undo.forward.output)
                result = await action.run(ctx, action.parse(params))
                cleaned.append(f"{undo.forward.name}: {result.message}")
            # Last: an undone label step may have put back the mark the cordon or taint step added before it.
            node = await kube.get_node(rem.node)
            patch = unmark_patch(node, rem.id)
            if patch:
                await kube.patch_node(rem.node, {"metadata": patch})
                cleaned.append("marks")
        # broad: best-effort cleanup after the release is recorded; any failure is logged and audited for a person, the
        # release stands
        except Exception as exc:
            log.warning("remediation %s released, but cleaning up node %s failed: %s", rem.id, rem.node, exc)
            await self.rt.repo.record_audit("node.cleanup_failed", remediation_id=rem.id,
                                            data={"node": rem.node, "error": str(exc)[:2000], "cleaned": cleaned})
        finally:
            acting_remediation.reset(token)
        return cleaned

