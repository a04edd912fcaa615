"""The async driver inside `remediator serve`: claims stored alerts and runnable remediations.

Webhook requests only store; this worker does the processing, so a crash between the 200 and the work loses
nothing: unprocessed alerts and unfinished remediations are claimed again (by this or another replica) once
their claim or lease expires. The API wakes it after each commit; it also polls, for other replicas' work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Protocol

from remediator.adapters.node_watch import NodeWatch
from remediator.definitions import DefinitionSet
from remediator.domain.silences import SILENCED_NOTE, ActiveSilence, SilenceSet
from remediator.domain.states import ACTIVE_STATES, STATES
from remediator.engine.approvals import Approvals
from remediator.engine.decision import (
    Decision,
    DecisionPolicy,
    NoTarget,
    Unmatched,
    decide_alert,
    escalation_subject,
    history_since,
)
from remediator.engine.decision_facts import BatchFacts
from remediator.engine.executor import Executor
from remediator.engine.hand_changes import NodeMarks
from remediator.engine.ladder import count_recurrence, log_escalation, new_remediation, remediation_plan
from remediator.engine.moves import after_resolved
from remediator.engine.outcomes import OutcomeSweep
from remediator.engine.planning import target_of, xid_variables
from remediator.engine.runtime import Runtime
from remediator.engine.versions import persist_version
from remediator.errors import RemediatorError, StoreUnavailable
from remediator.intake.normalize import GpuAlert, normalize
from remediator.kube.inventory import NodeInventory
from remediator.retrying import DEPENDENCIES, Backoff
from remediator.store import replica_guard
from remediator.store.audit_checkpoint import audit_head, verify_since
from remediator.store.decision_store import Finished, Lease, Started
from remediator.store.models import AlertRow, Remediation
from remediator.store.repository import utcnow
from remediator.store.retention import PruneReport, prune
from remediator.store.takeover import free_dead_claims

__all__ = ["Wakes", "Worker", "normalize_row"]

log = logging.getLogger(__name__)
# Deciding a batch of up to 1,000 alerts is CPU work on the event loop; it yields this often, so that the
# remediations already admitted or being admitted (a storm's quarantines) are not stalled behind it.
_YIELD_EVERY = 64
# Alerts decided and recorded in one transaction, by database. On PostgreSQL the batch's audit events are
# appended under the chain's lock, which every audited transaction of every replica takes at its commit, so
# a storm's admissions on all replicas wait behind a large batch (bench/fleet_storm.py: breaker reached in
# ~33 s with 250, 40-58 s with 1,000). SQLite has one replica and one writer: 1,000 decides 10,000 alerts in
# ~7 s where 250 takes ~13 s (bench/decide.py).
DECISION_BATCH = {"postgresql": 250}
DEFAULT_DECISION_BATCH = 1000
APPROVAL_SWEEP_S = 1.0  # the loop looks for overdue approval requests at most this often
STORE_BACKOFF_CAP_S = 5.0  # while the store is unavailable, the loop tries again at least this often
GUARD_POLL_S = 0.25  # while the replica guard is away, the loop looks this often whether it is back


def normalize_row(rt: Runtime, row: AlertRow) -> GpuAlert:
    defs = rt.definitions.current
    return normalize(
        row.labels,
        row.annotations,
        status=row.status,
        fingerprint=row.fingerprint,
        kinds=defs.alert_kinds,
        node_precedence=rt.settings.node_label_precedence,
        nodes_by_ip=rt.nodes_by_ip,
        starts_at=row.starts_at.isoformat() if row.starts_at else "",
        exporter_pod_prefixes=rt.settings.exporter_pod_prefixes,
    )


class Wakes(Protocol):
    """What the API needs of the worker: a wake once it has stored alerts or a decision (the `Worker` itself,
    or the web process's end of a worker process, `engine.worker_process.WorkerProcess`)."""

    def wake(self, *, alerts: bool = False) -> None: ...


class Worker:
    """Runs until stopped: alert intake, remediation dispatch, approval expiry, node inventory (a watch)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.executor = Executor(rt)
        self.outcomes = OutcomeSweep(rt)
        self._wake = asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._handed: list[Remediation] = []  # leased when they were decided, driven at the next dispatch
        self._full = False  # this iteration's claim of alerts or remediations took all it asked for: more may wait
        # Whether `dispatch` must claim even though this iteration handed over what it decided: False only when
        # `process_alerts` leased everything its batches started and resolved nothing (an undo needs a claim).
        self._claim_due = True
        self._alerts_stored = False  # a webhook stored alerts since the last claim of alerts (`wake(alerts=True)`)
        self._handed_over = False  # the last dispatch started drives it was handed (`_handover`)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._gauges_at = 0.0
        self._swept_at: float | None = None  # when the loop last swept overdue approvals
        self._guard: replica_guard.ReplicaGuard | None = None
        self._guard_acquired = False
        self._logged_head: tuple[int, str] | None = None
        self._verified: tuple[int, str] | None = None  # the newest audit event the periodic check passed
        self._audit_broken = False
        self._watch: NodeWatch | None = None
        # A person's uncordon or taint removal, and a node back from its reboot, as the node watch sees them.
        self.node_marks = NodeMarks(self.executor, stop=self._stop_drive, wake=self.wake,
                                    reboot_wake=rt.settings.reboot_watch_wake)

    def wake(self, *, alerts: bool = False) -> None:
        """Run the loop now. `alerts`: a webhook has just stored alerts, so the next claim need not look first
        whether there are any (`IntakeStore.claim_alerts`)."""
        self._alerts_stored |= alerts
        self._wake.set()

    async def start(self) -> None:
        await self.register()
        await self.refresh_inventory()
        self._tasks = [
            asyncio.create_task(self._loop(), name="remediator-worker"),
            asyncio.create_task(self._inventory_loop(), name="remediator-inventory"),
            asyncio.create_task(self._audit_loop(), name="remediator-audit"),
        ]

    async def register(self) -> None:
        """Take this database's replica guard; refuse to run beside another live controller.

        SQLite supports one replica, always. On PostgreSQL several replicas need
        REMEDIATOR_ALLOW_MULTIPLE_REPLICAS=true, so that a second controller started by mistake (a copied
        manifest, a forgotten test instance) is refused instead of acting on the same fleet. The guard is a
        lock that dies with its holder (store/replica_guard.py), so a crashed controller restarts at once;
        as the sole controller it then frees the claims and leases its dead predecessor left.
        """
        settings = self.rt.settings
        self._guard, self._guard_acquired = await asyncio.to_thread(
            replica_guard.hold, settings.database_url, self.rt.owner, exclusive=self._exclusive
        )
        self.rt.repo.health.guard = self._guard  # /readyz and the database metrics see it suspended or lost
        if self._exclusive:
            alerts, rems = await free_dead_claims(self.rt.repo, self.rt.owner)
            if alerts or rems:
                log.warning("took over from a stopped controller: freed %d alert claim(s) and %d remediation "
                            "lease(s)", alerts, rems)

    @property
    def _exclusive(self) -> bool:
        return self.rt.settings.is_sqlite or not self.rt.settings.allow_multiple_replicas

    async def _audit_loop(self) -> None:
        """Log the audit head (`seq:hash`, for `audit verify --anchor`) when it moved; prune when due."""
        settings = self.rt.settings
        next_prune = 0.0
        while not self._stopping:
            loop_time = asyncio.get_running_loop().time()
            try:
                if (settings.alert_retention or settings.audit_retention) and loop_time >= next_prune:
                    next_prune = loop_time + settings.prune_interval.total_seconds()
                    await self.prune()
                await self.log_audit_head()
                await self.verify_audit()
            except StoreUnavailable as exc:
                log.warning("audit housekeeping skipped: store unavailable: %s", exc)
            await asyncio.sleep(min(settings.audit_head_interval, settings.prune_interval).total_seconds())

    async def prune(self) -> PruneReport:
        settings = self.rt.settings
        now = utcnow()
        report = await prune(
            self.rt.repo,
            audit_before=now - settings.audit_retention if settings.audit_retention else None,
            alerts_before=now - settings.alert_retention if settings.alert_retention else None,
        )
        if report.deleted:
            log.info("retention: deleted %d alert(s), %d audit event(s)%s", report.alerts, report.audit_events,
                     f"; audit checkpoint at event {report.checkpoint.seq}" if report.checkpoint else "")
        return report

    async def log_audit_head(self, *, always: bool = False) -> None:
        async with self.rt.repo.transaction() as session:
            head = await audit_head(session)
        if head is not None and (always or head != self._logged_head):
            log.info("audit head %s:%s", *head)
            self._logged_head = head

    async def verify_audit(self) -> bool:
        """Check the audit chain appended since the last check; export the result as remediator_audit_verify_ok.

        The first check walks the whole chain (as `remediator audit verify` does), later ones only the new
        events. A failed check stays failed (the gauge stays 0) until the controller restarts.
        """
        if self._audit_broken:
            return False
        async with self.rt.repo.transaction() as session:
            report = await verify_since(session, self.rt.repo.audit_key, self._verified)
        if report.problem is not None:
            log.error("audit chain check failed at event %d: %s (run `remediator audit verify`)",
                      report.problem.event_id, report.problem.reason)
            self.rt.metrics.audit_verify_ok.set(0)
            self._audit_broken = True
            return False
        if report.head is not None:
            self._verified = report.head
        self.rt.metrics.audit_verify_ok.set(1)
        return True

    async def stop(self) -> None:
        self._stopping = True
        await self.node_marks.close()
        for task in [*self._tasks, *self._running.values()]:
            task.cancel()
        for task in [*self._tasks, *self._running.values()]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self._running.clear()
        handed, self._handed = self._handed, []
        for rem in handed:  # leased when decided, never driven: claimable again at once, not when the lease ends
            with contextlib.suppress(Exception):
                await self.rt.repo.release_lease(rem.id, self.rt.owner)
        await self.executor.admissions.close()
        await self.executor.contexts.close()
        if self._guard is not None:
            with contextlib.suppress(Exception):
                await self.log_audit_head(always=True)
            if self._guard_acquired:
                replica_guard.drop(self.rt.settings.database_url, self._guard)
            self._guard = None

    # -- loops ------------------------------------------------------------------------------------

    async def _loop(self) -> None:
        poll = self.rt.settings.worker_poll_interval.total_seconds()
        # While the store is unavailable, iterations are retried with capped backoff, not at every poll.
        store_backoff = Backoff(poll, max(poll, STORE_BACKOFF_CAP_S))
        while not self._stopping:
            if self._guard is not None and self._guard.lost.is_set():
                log.error("the single-replica guard is lost: no new work is started")
                return
            if self._guard is not None and self._guard.problem is not None:
                await self._pause_while_guard_is_away(self._guard)
                continue
            self._wake.clear()  # before the iteration: a wake() during it must not be lost
            now = asyncio.get_running_loop().time()
            sweep = self._swept_at is None or now - self._swept_at >= APPROVAL_SWEEP_S
            if sweep:
                self._swept_at = now
            self._full = False
            try:
                busy = await self.run_once(sweep_approvals=sweep)
                store_backoff.reset()
            except StoreUnavailable as exc:
                log.warning("store unavailable: %s", exc)
                with contextlib.suppress(TimeoutError):  # a wake (a webhook stored) ends the wait
                    await asyncio.wait_for(self._wake.wait(), timeout=store_backoff.next(exc))
                continue
            # broad: the worker loop must outlive any one iteration's failure (a bug, an unexpected peer error); logged
            # with its traceback
            except Exception:
                log.exception("worker iteration failed")
                busy = False
            # Again at once only when a claim came back full. Otherwise what this iteration found is in hand, and
            # an empty claim now would only run beside the drives it started (on the latency path of a new
            # remediation): new alerts and finished drives wake the loop, timers wait for the poll.
            if busy and self._full:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=poll)

    async def _pause_while_guard_is_away(self, guard: replica_guard.ReplicaGuard) -> None:
        """The replica guard's connection is down (the database is away): stop driving remediations, start
        nothing, and wait until the guard is held again (or lost: `_loop` then stops).

        Without the guard another controller may take over, and without the database no step can be
        recorded: the drives in flight are cancelled as a kill -9 would end them (each step is recorded
        before it acts and resumes from its record). Their leases expire and they are claimed again, by
        this replica or another, once the database answers."""
        log.warning("worker paused: %s", guard.problem)
        for task in self._running.values():
            task.cancel()
        self._handed.clear()  # leased when decided: claimed again once their leases expire
        while not self._stopping and guard.problem is not None and not guard.lost.is_set():  # noqa: ASYNC110 - set on the guard's thread
            await asyncio.sleep(GUARD_POLL_S)
        if not guard.lost.is_set() and not self._stopping:
            log.warning("worker resumed: the replica guard is held again")
            self.wake()

    async def _inventory_loop(self) -> None:
        watch = self._node_watch()
        if watch is not None:
            await watch.run()

    def _node_watch(self) -> NodeWatch | None:
        kube = self.rt.kube
        if kube is None:
            return None
        if self._watch is None or self._watch.kube is not kube:
            self._watch = NodeWatch(kube, on_change=self._publish_inventory, on_node=self.node_marks.seen,
                                    on_resync=self.node_marks.resynced)
        return self._watch

    def _stop_drive(self, rem_id: str) -> None:
        """Stop this replica's drive of a remediation that was let go (its lease was cleared with the move)."""
        task = self._running.get(rem_id)
        if task is not None and not task.done():
            task.cancel()

    def _publish_inventory(self, inventory: NodeInventory) -> None:
        self.rt.gpu_nodes = inventory.gpu_nodes
        self.rt.nodes_by_ip = inventory.nodes_by_ip
        self.rt.inventory = inventory

    async def refresh_inventory(self) -> None:
        """GPU node count (for percent limits) and InternalIP -> node name (for `instance` labels).

        A full paginated list; afterwards the inventory loop keeps them current with a watch
        (remediator/adapters/node_watch.py) instead of listing again.
        """
        watch = self._node_watch()
        if watch is None:
            return
        try:
            await watch.sync()
        except RemediatorError as exc:
            log.warning("node inventory refresh failed: %s", exc)

    # -- one iteration (tests call this directly) -------------------------------------------------

    async def run_once(self, *, sweep_approvals: bool = True) -> bool:
        """Process claimed alerts, expire approvals, dispatch remediations. True if there was work.

        The loop sweeps overdue approvals at most once every APPROVAL_SWEEP_S: a busy worker iterates
        back to back, and a sweep on every iteration was a query per iteration for requests that expire
        on a scale of minutes."""
        await self.rt.repo.intake_first()  # a webhook burst is stored first, processed right after
        processed = await self.process_alerts()
        dispatched = await self.dispatch()  # before the approval sweep: a new remediation starts at once
        if self._handed_over:
            # Drives just handed over are on their way to their first step: the sweep and the gauges (store
            # reads, each a few milliseconds) wait for the next iteration instead of running beside them.
            if sweep_approvals:
                self._swept_at = None  # still due
            return True
        if sweep_approvals:
            await self.expire_approvals()
        now = asyncio.get_running_loop().time()
        if now - self._gauges_at > 5:
            self._gauges_at = now
            await self._refresh_gauges()
            await self.outcomes.maybe_sweep()
        return processed > 0 or dispatched > 0

    async def process_alerts(self, limit: int | None = None) -> int:
        """Decide claimed alerts in arrival order: consecutive firing alerts as one batch (engine/decision.py,
        store/decision_store.py), a resolved alert on its own after what fired before it."""
        if limit is None:
            limit = DECISION_BATCH.get(self.rt.repo.dialect, DEFAULT_DECISION_BATCH)
        look_first, self._alerts_stored = not self._alerts_stored, False
        # Webhooks spooled by the web process (store/intake_spool.py) go into the database first.
        taken = await self.rt.repo.move_spooled(limit)
        self._full |= taken >= limit
        look_first = look_first and not taken
        rows = await self.rt.repo.claim_alerts(
            self.rt.owner, limit, self.rt.settings.lease_duration, look_first=look_first
        )
        self._full |= len(rows) >= limit
        self._claim_due = any(row.status == "resolved" for row in rows)
        firing: list[AlertRow] = []
        for row in rows:
            if row.status != "resolved":
                firing.append(row)
                continue
            await self.decide_alerts(firing)
            firing = []
            await self._guarded(row, self._resolve)
        await self.decide_alerts(firing)
        return len(rows)

    async def _resolve(self, row: AlertRow) -> None:
        await after_resolved(self.rt, await self.rt.repo.record_resolved(row))

    async def _guarded(self, row: AlertRow, work: Callable[[AlertRow], Awaitable[object]]) -> None:
        """Run `work` for one alert; an error (not the store's) closes the alert as `error`, audited."""
        try:
            await work(row)
        except StoreUnavailable:
            raise
        # broad: one alert's failure of any kind closes that alert as `error` (audited) instead of stopping the worker;
        # the store's own is raised above
        except Exception as exc:
            log.exception("alert %s could not be processed", row.id)
            error = _error(row, exc)
            await self.rt.repo.finish_alert(row.id, error.outcome, note=error.note, audit_kind=error.audit_kind,
                                            audit_data=error.audit_data)

    async def decide_alerts(self, rows: Sequence[AlertRow]) -> None:
        """Decide firing alerts together: their facts in two reads, their outcomes in one transaction."""
        if not rows:
            return
        defs = self.rt.definitions.current
        policy = DecisionPolicy.of(self.rt.settings)
        alerts: dict[int, GpuAlert] = {}
        decided: dict[int, Finished | Started] = {}
        silences = SilenceSet(await self.rt.repo.active_silences(self.rt.clock()))  # once for the batch
        for i, row in enumerate(rows):
            if i and not i % _YIELD_EVERY:
                await asyncio.sleep(0)  # a batch is ~0.6 ms of CPU an alert: let admissions and steps go on
            if silences and (held := silences.match(row.labels)) is not None:
                decided[row.id] = _silenced(row, held)
                continue
            try:
                alerts[row.id] = normalize_row(self.rt, row)
            # broad: normalising reads outside data; any failure closes this alert as `error` and the batch goes on
            except Exception as exc:
                log.exception("alert %s could not be processed", row.id)
                decided[row.id] = _error(row, exc)
        facts = await self._facts(list(alerts.values()), defs, policy)
        for i, row in enumerate(rows):
            alert = alerts.get(row.id)
            if alert is None:
                continue
            if i and not i % _YIELD_EVERY:
                await asyncio.sleep(0)
            try:
                decided[row.id] = self._verdict(row, alert, decide_alert(alert, defs, policy, facts.of(alert)), defs)
            # broad: deciding runs definitions (CEL, templates) on outside data; any failure closes this alert as
            # `error`, the batch goes on
            except Exception as exc:
                log.exception("alert %s could not be processed", row.id)
                decided[row.id] = _error(row, exc)
        batch = [(row, decided[row.id]) for row in rows]
        if any(isinstance(verdict, Started) for _, verdict in batch):
            await persist_version(self.rt.repo, self.rt.definitions, defs)
        lease = self._handover()
        if lease is not None:  # read the contexts of what it will be handed while the decision commits
            started = [(row, verdict.new) for row, verdict in batch if isinstance(verdict, Started)]
            for row, new in started[: lease.limit]:
                self.executor.contexts.start(row.id, self.executor.read_context(target_of(new), row.labels, None))
        try:
            _, leased = await self.rt.repo.record_and_lease(batch, lease)
        except StoreUnavailable:
            self.executor.contexts.keep(())
            raise
        # broad: any failure of the batch write (a constraint, a bug in one row) falls back to one alert at a time,
        # which isolates it
        except Exception:
            self.executor.contexts.keep(())
            log.exception("a batch of %d decided alerts could not be recorded together: one at a time", len(batch))
            self._claim_due = True
            for row, verdict in batch:
                await self._guarded(row, partial(self._record_alone, verdict=verdict))
            return
        self.executor.contexts.keep({rem.alert_id for rem in leased if rem.alert_id is not None})
        self._handed.extend(leased)  # `dispatch`, next in the same iteration, starts driving them
        if lease is None or len(leased) >= lease.limit:  # what the batch started may not all be leased
            self._claim_due = True

    def _handover(self) -> Lease | None:
        """An idle worker leases the remediations a batch starts in the deciding transaction, and `dispatch`
        drives them without claiming or reading them first. A busy one leaves them to be claimed in
        `dispatch`'s order (new before running before held, oldest first)."""
        self._forget_finished()
        if self._running or self._handed or self._stopping:
            return None
        return Lease(self.rt.owner, self.rt.settings.lease_duration, self.rt.settings.worker_concurrency)

    async def _record_alone(self, row: AlertRow, *, verdict: Finished | Started) -> None:
        await self.rt.repo.record_decisions([(row, verdict)])

    async def _facts(self, alerts: Sequence[GpuAlert], defs: DefinitionSet, policy: DecisionPolicy) -> BatchFacts:
        """What `decide_alert` needs about these alerts' GPUs and nodes, read for all of them at once."""
        repo = self.rt.repo
        now = repo.clock()
        counted = [a for a in alerts if escalation_subject(a, defs, policy) is not None]
        labels = tuple(self.rt.settings.node_label_precedence)
        recent = await repo.firing_alerts_on_nodes(
            [a.alertname for a in counted], [str(a.node) for a in counted], now - policy.escalation_window, labels,
        )
        nodes = [a.node for a in alerts if a.node] if policy.ladder else []
        histories = await repo.node_histories(nodes, history_since(now, policy)) if nodes else {}
        return BatchFacts(now, recent, histories, labels)

    def _verdict(self, row: AlertRow, alert: GpuAlert, decision: Decision, defs: DefinitionSet) -> Finished | Started:
        if isinstance(decision, Unmatched):
            return Finished("unmatched", None, "alert.unmatched", {
                "alert_id": row.id, "alertname": row.alertname, "fingerprint": row.fingerprint, "kind": alert.kind,
                "node": alert.node})
        if isinstance(decision, NoTarget):
            return Finished("no_target", alert.node_problem or "no node label found", "alert.no_target", {
                "alert_id": row.id, "rule": decision.proposal.rule_name,
                "looked_for": list(self.rt.settings.node_label_precedence), "problem": alert.node_problem})
        if decision.recurrence is not None:
            count_recurrence(self.rt.metrics, decision.recurrence)
        proposal = decision.proposal
        if decision.escalation is not None and decision.recurrence is not None:
            previous = decision.recurrence.previous
            log_escalation(
                previous.playbook, proposal.playbook.name, node=alert.node, gpu=alert.gpu_uuid, from_id=previous.id,
                new_id=None, why=f"the fault came back {int(decision.recurrence.after.total_seconds())}s after it "
                "returned the GPU to service",
            )
        plan = remediation_plan(proposal, alert, defs, xid_variables(alert, defs, None), escalation=decision.escalation)
        return Started(new_remediation(proposal, defs, plan))

    async def expire_approvals(self) -> None:
        """Close overdue approval requests (expired, audited, notified; or continued per playbook)."""
        if await Approvals(self.rt).expire_due():
            self.wake()

    def _forget_finished(self) -> None:
        for rem_id, task in list(self._running.items()):
            if task.done():
                del self._running[rem_id]

    def _start_drive(self, rem: Remediation) -> None:
        self._running[rem.id] = asyncio.create_task(self._drive(rem.id, rem), name=f"remediation-{rem.id}")

    async def dispatch(self) -> int:
        self._forget_finished()
        handed, self._handed = self._handed, []
        for rem in handed:
            self._start_drive(rem)
        self._handed_over = bool(handed)
        claim_due, self._claim_due = self._claim_due, True
        if handed and not claim_due:
            # An idle worker was handed all its batches started; a claim now would only run beside these drives,
            # on their latency path. Anything else runnable (a timer that fell due, another replica's expired
            # lease) is claimed at the next wake (these drives' ends) or poll.
            self.rt.crowded = False
            return len(handed)
        room = self.rt.settings.worker_concurrency - len(self._running)
        if room <= 0:
            self.rt.crowded = True
            return len(handed)
        claimed = await self.rt.repo.claim_remediation_rows(self.rt.owner, room, self.rt.settings.lease_duration)
        self.rt.crowded = len(claimed) == room
        self._full |= self.rt.crowded
        for rem in claimed:
            self._start_drive(rem)
        return len(handed) + len(claimed)

    async def _drive(self, rem_id: str, claimed: Remediation | None = None) -> None:
        """Drive one remediation. A crash inside `drive` is recorded and backed off there (one log line per
        crash); what escapes here is the store failing, or the crash record itself failing."""
        try:
            await self.executor.drive(rem_id, claimed)
        except StoreUnavailable as exc:
            log.warning("remediation %s paused by store error: %s", rem_id, exc)
        # broad: the last guard of a drive task: whatever escapes (a crash whose record failed) is logged, never lost
        # with the task
        except Exception:
            log.exception("remediation %s crashed and its crash could not be recorded", rem_id)
        finally:
            self.wake()

    async def drain_idle(self, timeout: float = 30.0) -> None:
        """Run until no alert or remediation is runnable and nothing is in flight (for tests and demo)."""
        async with asyncio.timeout(timeout):
            while True:
                busy = await self.run_once()
                running = [t for t in self._running.values() if not t.done()]
                if running:
                    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    continue
                if not busy:
                    return

    async def _refresh_gauges(self) -> None:
        self.rt.metrics.alerts_undecided.labels(where="spooled").set(await self.rt.repo.spooled_alert_count())
        self.rt.metrics.alerts_undecided.labels(where="stored").set(await self.rt.repo.pending_alert_count())
        counts = await self.rt.repo.count_by_state()
        for state in STATES:  # a state that emptied reads 0, not its last count
            self.rt.metrics.remediations_active.labels(state=state).set(counts.get(state, 0))
        waiting = await self.rt.repo.waiting_by_dependency(DEPENDENCIES)
        for dependency in DEPENDENCIES:
            self.rt.metrics.remediations_waiting.labels(dependency=dependency).set(waiting.get(dependency, 0))
        oldest = await self.rt.repo.oldest_active()
        now = self.rt.clock()
        for state in ACTIVE_STATES:
            at = oldest.get(state)
            self.rt.metrics.oldest_active.labels(state=state).set((now - at).total_seconds() if at else 0)


def _silenced(row: AlertRow, silence: ActiveSilence) -> Finished:
    """An alert an active silence holds: recorded as `silenced` (the note names the silence), starts nothing."""
    return Finished("silenced", f"{SILENCED_NOTE}{silence.id}", "alert.silenced", {
        "alert_id": row.id, "alertname": row.alertname, "fingerprint": row.fingerprint, "silence_id": silence.id,
        "createdBy": silence.created_by, "comment": silence.comment})


def _error(row: AlertRow, exc: Exception) -> Finished:
    return Finished("error", str(exc)[:2000], "alert.error", {"alert_id": row.id, "error": str(exc)[:2000]})
