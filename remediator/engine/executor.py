"""Step execution for one remediation while this replica holds its lease.

Each loop iteration re-reads the remediation from the store, does exactly one thing (admit, one step, one
revert step, or a final transition) and records it with its audit event before the next. A crash anywhere
leaves the cursor at the step in flight; on resume that step runs again, which is safe because every
action is idempotent and long actions (drain) checkpoint their progress.

Error boundary: whatever goes wrong inside a step, forward or revert (its condition, its templates, its
parameters, the action, a peer's answer), becomes that step's failure with the reason; only the store
(lease lost, database unavailable) and the engine's own signals pass through. Anything that still escapes
`drive` is a crash: recorded on the remediation, backed off exponentially (persisted, so a restart keeps
it), and after MAX_CRASHES in a row the remediation is `failed` with the error's last line.

Templates are rendered once: a step's parameters come from the playbook, and alert text enters them only
as variables. What was rendered (stored step params, outputs) is data and never rendered again; an undo
without an explicit `revert:` reuses the stored rendered parameters verbatim.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from remediator.actions.base import ActionContext, ActionResult, AnyAction, Target
from remediator.actions.context import Gathered, alert_pod, exporter_gpu_context, gather
from remediator.actions.wait import CancelRemediation, GateUnknown, ResumeLater
from remediator.definitions import Playbook, Step
from remediator.definitions.templates import render_params
from remediator.domain.guardrails import BREAKER_REASON, GuardrailFacts, MaintenanceWindow, decide
from remediator.domain.pauses import ActivePause, held_by
from remediator.domain.plan_snapshot import plan_of, playbook_of, stored_alert_field
from remediator.domain.returns import gate_step_kind, returned_reason, skip_of, skipped_note
from remediator.domain.states import Event
from remediator.engine.admissions import AdmissionQueue
from remediator.engine.approval_decisions import step_approved
from remediator.engine.approvals import Approvals
from remediator.engine.first_step import PreparedStep, prepare_first_step
from remediator.engine.gpu_context import ContextPrefetch
from remediator.engine.gpu_instance import instance_context
from remediator.engine.ladder import Ladder, utc
from remediator.engine.moves import entered, move, notify
from remediator.engine.mutation_audit import acting_remediation
from remediator.engine.planning import approval_required, build_variables, step_applies, target_of
from remediator.engine.runtime import Runtime
from remediator.engine.storm_guard import StormGuard
from remediator.errors import (
    ActionError,
    Conflict,
    IllegalTransition,
    PermanentError,
    StepFailed,
    StoreUnavailable,
)
from remediator.intake.normalize import GpuAlert
from remediator.kube.vocabulary import EXCLUDE_LABEL, excluded
from remediator.process.logs import log_fields
from remediator.retrying import (
    CONFLICT_ATTEMPTS,
    CONTEXT_READ_FAILED,
    WAITING_PREFIX,
    DependencyWaiting,
    TransientPolicy,
    is_transient,
    on_conflict,
)
from remediator.settings import Settings
from remediator.store.flag_store import OVERRIDE_FLAG_PREFIX, PAUSE_FLAG
from remediator.store.models import Remediation, StepRow
from remediator.store.read_store import SteadyCounts, SteadyQuery
from remediator.store.remediation_store import AdmissionRequest
from remediator.store.repository import LeaseLost, StateMoved

__all__ = [
    "Executor", "RevertStep", "StepFailure", "failure_reason", "last_line", "run_with_retries", "transient_policy",
]


@dataclass(frozen=True)
class StepFailure:
    """A step that failed: the error text and what the action found before failing (ActionError.output)."""

    error: str
    output: dict[str, Any]


log = logging.getLogger(__name__)
REVERT_PAUSED = "controller is paused: the undo waits before its next step"
# A gate step's progress key while its verdict is unknown: since, looks, agent, symptom, detail.
GATE_UNKNOWN = "gate_unknown"
REVERT_RESUMED = "controller resumed: the undo goes on"
# Not a step's failure: the engine's own signals and the store's; they pass the step error boundary.
@dataclass(frozen=True)
class _StepEnd:
    """How a step failed: the error, what the action found (None when it failed before the action answered)
    and the step's rendered params (empty when it failed before they were rendered)."""

    error: str
    output: dict[str, Any] | None
    params: dict[str, Any]


_PASS_THROUGH: tuple[type[BaseException], ...] = (
    ResumeLater, CancelRemediation, LeaseLost, StoreUnavailable, DependencyWaiting,
)
_MAX_REASON = 2000


def last_line(exc: BaseException) -> str:
    """The last line of the exception's traceback (`UndefinedError: 'x' is undefined`), bounded."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    line = text[-1] if text else type(exc).__name__
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 1] + "…"


def failure_reason(exc: BaseException) -> str:
    """A step failure's reason: the error's type and message, on one bounded line."""
    message = exc.message if isinstance(exc, ActionError) else str(exc)
    lines = [line.strip() for line in message.splitlines() if line.strip()]  # e.g. pydantic's field lines
    text = f"{type(exc).__name__}: {'; '.join(lines)}".rstrip(": ")
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


@dataclass(frozen=True)
class RevertStep:
    """One undo: the forward step it undoes, the action, and its parameters.

    `templated` is True only for an explicit `revert:` of the playbook, whose parameters are templates
    rendered once before the undo runs; a default undo's parameters are the forward step's stored
    rendered parameters, used verbatim.
    """

    forward: StepRow
    action: str
    params: dict[str, Any]
    templated: bool


def transient_policy(settings: Settings, retries: int | None = None) -> TransientPolicy:
    """The policy for a step's (and the context read's) transient errors, from the settings. A step with
    `retries: 0` (a long or costly action its playbook does not want run again at once) has no budget: its
    first transient error makes the remediation wait for the dependency, and the step runs again later."""
    budget = 0.0 if retries == 0 else settings.transient_budget_s
    return TransientPolicy(budget=budget, cap=settings.transient_backoff_max_s)


async def run_with_retries(
    action: AnyAction, ctx: ActionContext, params: Any, *, timeout: float, policy: TransientPolicy | None = None
) -> ActionResult:
    """Run an action with a deadline; retry its transient errors (connection, timeout, 429, 5xx) within the
    policy's budget, honouring Retry-After (remediator/retrying.py). Steps are idempotent, so the action runs
    again from the top. DependencyWaiting when the budget runs out, or when the deadline passes while the
    dependency is failing: a transient failure never fails the step. A permanent error is raised at once."""
    policy = policy or transient_policy(ctx.settings)
    first: datetime | None = None
    last: BaseException | None = None

    def note(exc: BaseException, wait: float) -> None:
        nonlocal first, last
        first, last = first or utc(datetime.now()), exc
        log.info("step %s of remediation %s: %s; retrying in %.1fs", ctx.step_name, ctx.remediation_id,
                 failure_reason(exc), wait)

    async def attempt() -> ActionResult:
        # A 409 that escapes the action (a write guarded by a resourceVersion it read) runs it again at once,
        # a few times (remediator.retrying.on_conflict); then it is a permanent failure of the step.
        try:
            async for conflict in on_conflict(Conflict):
                with conflict:
                    return await action.run(ctx, params)
        except Conflict as exc:
            raise StepFailed(f"{failure_reason(exc)} ({CONFLICT_ATTEMPTS} attempts)") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    try:
        async with asyncio.timeout(timeout):
            return await policy.call(attempt, on_retry=note)
    except TimeoutError:
        if last is not None and first is not None:
            raise DependencyWaiting(last, first) from None
        raise StepFailed(f"{action.name} did not finish within {timeout:g}s") from None


def remediation_log_fields(rem: Remediation) -> dict[str, str]:
    """What every log record names while this remediation is driven (remediator/process/logs.py)."""
    fields = {"remediation": rem.id, "node": rem.node, "gpu": rem.gpu_uuid or rem.gpu_index, "rule": rem.rule}
    return {k: str(v) for k, v in fields.items() if v}


def alert_of(rem: Remediation) -> GpuAlert:
    return plan_of(rem).alert


def alert_started(rem: Remediation) -> datetime:
    """The alert's startsAt (from the plan), else when the remediation was created; always UTC-aware."""
    raw = stored_alert_field(rem.plan, "starts_at")
    if isinstance(raw, str) and raw:
        try:
            return utc(datetime.fromisoformat(raw.replace("Z", "+00:00")))
        except ValueError:
            pass
    return utc(rem.created_at)


@dataclass(frozen=True)
class SteadyFacts:
    """The guardrail facts about one remediation alone, read before the admission lock (`_steady_facts`)."""

    now: datetime
    paused: bool
    node_excluded: bool
    flapping: bool
    node_recent_remediations: int
    override: bool
    pause_reason: str | None = None  # a scoped pause holds it (domain/pauses.py)
    storm_reason: str | None = None  # it shares an open storm's suspected cause (engine/storm_guard.py)


class Executor:
    """Drives remediations for one replica (`rt.owner`)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.admissions = AdmissionQueue(rt.repo)  # this replica's admissions go to the store together
        self.contexts = ContextPrefetch()  # contexts read while their remediations' decision commits (worker)
        self.storms = StormGuard(rt)  # the shared-cause analysis of the window, kept between admissions

    # -- public -----------------------------------------------------------------------------------

    async def drive(self, rem_id: str, claimed: Remediation | None = None) -> None:
        """Advance one remediation until it waits, finishes or loses its lease; always release the lease.

        `claimed` is the row as the claiming transaction left it, used instead of reading it again."""
        acting_remediation.set(rem_id)
        log_fields.set({"remediation": rem_id})  # this task's records name the remediation (remediator/process/logs.py)
        renewer = asyncio.create_task(self._renew(rem_id))
        next_run: timedelta | None = None
        # As the claiming, then the admitting, transaction left it: no need to read it again.
        known: Remediation | None = claimed if claimed is not None and claimed.id == rem_id else None
        admitted = False  # the admission just passed: it read the pause flag under its lock a moment ago
        begun: PreparedStep | None = None  # the first step, begun by that admission
        try:
            while True:
                await self.rt.repo.intake_first()
                rem, known = known or await self.rt.repo.get(rem_id), None
                if rem is None or rem.lease_owner != self.rt.owner:
                    return
                log_fields.set(remediation_log_fields(rem))
                if rem.state in ("pending", "held"):
                    started = await self._admit(rem)
                    if started is None:
                        next_run = self.rt.settings.held_recheck_interval
                        return
                    (known, begun), admitted = started, True
                elif rem.state == "running":
                    later = await self._forward(rem, admitted=admitted, begun=begun)
                    admitted, begun = False, None
                    await self._dependency_back(rem)
                    if later is not None:  # the step asked to run again later (e.g. `wait`)
                        next_run = later
                        return
                    if self.rt.crowded:  # others wait for a slot: continue after them (Runtime.crowded)
                        next_run = timedelta(0)
                        return
                elif rem.state == "reverting":
                    later = await self._revert(rem)
                    await self._dependency_back(rem)
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
            fresh = await self.rt.repo.get(rem_id)
            if fresh is None or fresh.state == exc.state:
                await self._crashed(rem_id, exc)
            else:
                log.info("remediation %s moved to %s while driven; it goes on from there", rem_id, fresh.state)
        except DependencyWaiting as waiting:
            next_run = await self._waiting(rem_id, waiting)
        except Exception as exc:
            if is_transient(exc):  # a dependency failed outside a step's retries: wait for it, not a crash
                next_run = await self._waiting(rem_id, DependencyWaiting(exc, utc(datetime.now())))
            else:
                await self._crashed(rem_id, exc)
        finally:
            renewer.cancel()
            await self.rt.repo.release_lease(rem_id, self.rt.owner, next_run_in=next_run)

    async def _waiting(self, rem_id: str, waiting: DependencyWaiting) -> timedelta | None:
        """The remediation waits for a dependency: its state reason says which and since when (once), and it
        runs again from the same step after `dependency_recheck_s`. Nothing is failed or counted as a crash."""
        try:
            changed = await self.rt.repo.note_dependency_waiting(
                rem_id, self.rt.owner, waiting.reason, waiting.dependency
            )
        except LeaseLost:
            return None
        if changed:
            log.warning("remediation %s %s; last error: %s", rem_id, waiting.reason, failure_reason(waiting.error))
        return timedelta(seconds=self.rt.settings.dependency_recheck_s)

    async def _dependency_back(self, rem: Remediation) -> None:
        """A step went through after the remediation waited for a dependency: its reason stops saying so."""
        if (rem.state_reason or "").startswith(WAITING_PREFIX):
            await self.rt.repo.note_dependency_back(rem.id, self.rt.owner)
            rem.state_reason = None

    async def _crashed(self, rem_id: str, exc: Exception) -> None:
        """Record a crash with its backoff (or end the remediation `failed`); one log line per crash."""
        settings = self.rt.settings
        error = last_line(exc)
        try:
            crashes, not_before = await self.rt.repo.record_crash(
                rem_id, self.rt.owner, error=error, backoff=settings.crash_backoff,
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
        rem = await self.rt.repo.get(rem_id)  # record_crash has moved it (event `crash`) to `failed`
        if rem is not None:
            await entered(self.rt, rem, f"crashed {crashes} times: {error}")

    # -- leases -----------------------------------------------------------------------------------

    async def _renew(self, rem_id: str) -> None:
        lease = self.rt.settings.lease_duration
        while True:
            await asyncio.sleep(lease.total_seconds() / 3)
            if not await self.rt.repo.renew_lease(rem_id, self.rt.owner, lease):
                return

    # -- admission --------------------------------------------------------------------------------

    async def _admit(self, rem: Remediation) -> tuple[Remediation, PreparedStep | None] | None:
        """Gather the context (first time only) and ask the guardrails; the started remediation with its first
        step when the admission began it (engine/first_step.py), or None when it is held."""
        gathered: dict[str, Any] | None = None
        node: dict[str, Any] | None = None
        if not rem.context:  # stored with the admission (one transaction); kept when the remediation is held
            prefetched = [self.contexts.take(rem.alert_id)]

            async def read_once() -> Gathered:
                # The read ahead's answer first (its transient error waits like any other), then a new read.
                if prefetched:
                    got = await prefetched.pop()
                    if got is not None:
                        return got
                return await self.read_context(target_of(rem), rem.alert_labels, rem.id)

            # Transient failures wait and retry within the budget; then the remediation waits (drive). A
            # permanent one (a pod name the API refuses, 403) ends it once, with the API's message.
            try:
                read = await transient_policy(self.rt.settings).call(read_once)
            except PermanentError as exc:
                error = failure_reason(exc)
                await move(self.rt, rem.id, Event.CRASH, reason=f"{CONTEXT_READ_FAILED}{error}",
                           owner=self.rt.owner, data={"error": error}, detail=error)
                return None
            rem.context = gathered = read.context
            node = read.node
        first = await self._prepare_first(rem, node) if rem.state == "pending" else None
        # The opt-out label and the scoped pauses as they are now (the context's labels are those of its read).
        live = node.get("metadata", {}).get("labels") if node is not None and gathered is not None else None
        labels = dict(live or {}) if live is not None else await self._live_labels(rem)
        scoped = held_by(await self.rt.repo.active_pauses(), rem.node, labels, rem.playbook)
        quarantines = self._quarantines(rem)
        settings = self.rt.settings
        now = self.rt.repo._clock()
        steady = SteadyQuery(
            override_key=f"{OVERRIDE_FLAG_PREFIX}{rem.id}", fingerprint=rem.alert_fingerprint,
            flap_since=now - settings.flap_window, node=rem.node if quarantines else None,
            node_since=now - settings.node_repeat_window, exclude=rem.id,
        )

        async def facts(session: AsyncSession, counts: SteadyCounts | None) -> GuardrailFacts:
            assert counts is not None  # asked for with `steady`
            # The time of the decision (the request may have waited for an earlier batch to commit).
            at = self.rt.repo._clock()
            storm = await self.storms.hold(rem, at, session)  # in the admitting transaction, in order
            steady_facts = self._steady_facts(rem, at, counts, labels=labels, scoped=scoped, storm=storm)
            return await self._breaker_facts(session, rem, quarantines, steady_facts)

        admitted, verdict, changed = await self.admissions.admit(
            AdmissionRequest(rem.id, self.rt.owner, decide, facts, context=gathered, steady=steady,
                             first_step=first.begin if first is not None else None)
        )
        self.storms.announce(verdict.reason if admitted.state == "held" and changed and verdict.name == "storm"
                             else None)
        if admitted.state == "held":
            if changed:  # a new trip, not a re-check of one already counted and announced
                self.rt.metrics.guardrail_trips.labels(guardrail=verdict.name).inc()
                if verdict.name != "storm":  # the storm's one message, updated in place, tells of every hold
                    await self._notify(rem, "held", verdict.reason)
            return None
        await self._notify(rem, "started", verdict.reason)
        return admitted, first

    async def _prepare_first(self, rem: Remediation, node: dict[str, Any] | None) -> PreparedStep | None:
        """Step 0 of a new remediation, to begin with its admission (engine/first_step.py)."""
        playbook = playbook_of(rem)
        if rem.current_step != 0 or not playbook.steps:
            return None
        step = playbook.steps[0]
        return await prepare_first_step(
            step, self.rt.actions.get(step.action), require_approval=plan_of(rem).require_approval,
            variables=self._variables(rem, []), node=node, observe=self._observe,
            ctx=self._context(rem, step.name, step.timeout.total_seconds(), "forward", 0, {}, None),
        )

    async def read_context(self, target: Target, labels: Mapping[str, str], rem_id: str | None) -> Gathered:
        """A remediation's context: node, pods and owners (`gather_context`), then its GPU's pods (sidecar).
        `rem_id` names the remediation in logs (None when read ahead of the decision: ContextPrefetch)."""
        gathered = await gather(self.rt.kube, target, labels, self.rt.settings)
        return Gathered(await self._gpu_context(target, gathered.context, rem_id, labels), gathered.node)

    async def _gpu_context(
        self, target: Target, context: dict[str, Any], rem_id: str | None, labels: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Pods of the affected GPU from the node's sidecar; every GPU pod of the node when it cannot answer.

        Only for alerts naming a GPU, with cluster access (the sidecar is found at the node's InternalIP).
        Adds `gpu_uuid` (an index-only alert resolved through the sidecar inventory) and `pod_source`:
        "sidecar" with `gpu_pods` = {uuid: [{namespace, name, uid, active}]} (what a `gpu:<uuid>` drain
        selects; the gathered `pods` are marked with `gpu`/`active`, and for a GPU target narrowed to that
        GPU's pods and the alert's), "exporter" when the sidecar cannot answer but the alert names the pod
        using the GPU (dcgm-exporter's pod mapping: `exporter_gpu_context`), or "node" with `sidecar_error`
        saying why `pods` stays every GPU pod on the node. The sidecar wins when both answer; the alert's pod
        is then kept as `exporter_pod`. A sidecar problem never fails admission.
        """
        if (target.gpu_uuid is None and target.gpu_index is None) or self.rt.kube is None:
            return context
        context = {**context, "gpu_uuid": target.gpu_uuid}
        ip = (context.get("node") or {}).get("internal_ip")
        sidecar = self.rt.sidecar
        uuid = target.gpu_uuid
        answer: Mapping[str, Any] | None = None
        error = "no sidecar client configured" if sidecar is None else f"node {target.node} reports no InternalIP"
        if sidecar is not None and ip:
            try:
                if uuid is None:
                    inventory = await sidecar.gpus(ip, attempts=1)
                    uuid = next((g.uuid for g in inventory.gpus if str(g.index) == str(target.gpu_index) and g.uuid),
                                None)
                    error = f"no GPU with index {target.gpu_index} in the sidecar inventory"
                if uuid is not None:
                    answer = (await sidecar.gpu_pods(ip, uuid, attempts=1)).model_dump(mode="json", exclude_unset=True)
            except ActionError as exc:
                error = exc.message
            except Exception as exc:  # an unexpected answer must not block admission either
                log.warning("sidecar context for remediation %s failed", rem_id or target.key, exc_info=True)
                error = f"{type(exc).__name__}: {exc}"
        named = alert_pod(labels or {}, target, self.rt.settings.exporter_pod_prefixes)
        if answer is None or uuid is None:
            context.update(pod_source="node", sidecar_error=error)
            return exporter_gpu_context(context, target, named, uuid or target.gpu_uuid)

        on_gpu = [
            {"namespace": p.get("namespace"), "name": p.get("name"), "uid": p.get("uid"), "active": p.get("active")}
            for p in answer.get("pods") or [] if isinstance(p, Mapping)
        ]
        by_key = {str(p["uid"]): p for p in on_gpu if p.get("uid")}
        by_key.update({f"{p['namespace']}/{p['name']}": p for p in on_gpu})
        narrow = target.on_gpu
        pods: list[dict[str, Any]] = []
        seen: set[str] = set()
        for pod in context.get("pods") or []:
            match = by_key.get(str(pod.get("uid"))) or by_key.get(f"{pod.get('namespace')}/{pod.get('name')}")
            if match is not None:
                seen.add(f"{match['namespace']}/{match['name']}")
                pods.append({**pod, "gpu": uuid, "active": match.get("active")})
            elif not narrow or pod.get("from_alert"):
                pods.append(pod)
        for extra in on_gpu:  # allocated by the kubelet but not (or no longer) listed by the API server
            if f"{extra['namespace']}/{extra['name']}" not in seen:
                pods.append({**extra, "node": target.node, "phase": None, "gpu_request": 0, "owners": [],
                             "from_alert": False, "gpu": uuid})
        context.update(gpu_uuid=uuid, gpu_pods={uuid: on_gpu}, pod_source="sidecar", pods=pods)
        if named is not None:  # the exporter answered too: the sidecar wins, the alert's pod stays on record
            context["exporter_pod"] = f"{named[0]}/{named[1]}"
        if sidecar is not None and ip:  # a MIG GPU instance the alert names: that instance's pods (gpu_instance.py)
            context.update(await instance_context(sidecar, ip, uuid, labels, rem_id or target.key))
        return context

    def _quarantines(self, rem: Remediation) -> bool:
        playbook = playbook_of(rem)
        return any(
            getattr(self.rt.actions.get(step.action), "quarantines", False) for step in playbook.steps
        )

    def _steady_facts(
        self, rem: Remediation, now: datetime, counts: SteadyCounts, *, labels: Mapping[str, str] | None = None,
        scoped: ActivePause | None = None, storm: str | None = None,
    ) -> SteadyFacts:
        """The guardrail facts about this remediation alone (pause, override, flapping, the node's history),
        from what the admission batch read for it before the admission lock: other admissions do not change
        them."""
        settings = self.rt.settings
        node_labels = labels if labels is not None else (rem.context.get("node") or {}).get("labels") or {}
        flag = bool(counts.pause and counts.pause.get("paused"))
        return SteadyFacts(
            now=now,
            paused=flag or scoped is not None,
            node_excluded=excluded(node_labels),
            flapping=counts.flaps >= settings.flap_threshold > 0,
            node_recent_remediations=counts.node_remediations,
            override=counts.override,
            pause_reason=None if flag or scoped is None else scoped.describe(),
            storm_reason=storm,
        )

    async def _breaker_facts(
        self, session: AsyncSession, rem: Remediation, quarantines: bool, steady: SteadyFacts
    ) -> GuardrailFacts:
        """The facts every admission changes (quarantined nodes, recent starts, the held queue), read under the
        admission lock, with the steady ones read before it."""
        settings = self.rt.settings
        now = steady.now
        quarantined = frozenset(await self.rt.repo.quarantined_nodes(session))
        limit = settings.quarantine_limit.resolve(self.rt.gpu_nodes)
        queued_ahead = 0
        if quarantines and rem.node not in quarantined and len(quarantined) < limit:  # room: is a queue ahead?
            ahead = await self.rt.repo.held_for_room_before(session, rem.id, rem.created_at, rem.node, BREAKER_REASON)
            queued_ahead = len(ahead - quarantined)
        return GuardrailFacts(
            now=now,
            paused=steady.paused,
            pause_reason=steady.pause_reason,
            node=rem.node,
            node_excluded=steady.node_excluded,
            quarantines=quarantines,
            quarantined_nodes=quarantined,
            limit_nodes=limit,
            gpu_nodes=self.rt.gpu_nodes,
            recent_quarantine_starts=await self.rt.repo.recent_quarantine_starts(
                session, now - settings.quarantine_rate_window
            ),
            rate_limit=settings.quarantine_rate,
            flapping=steady.flapping,
            node_recent_remediations=steady.node_recent_remediations,
            node_repeat_limit=settings.node_repeat_limit,
            windows=tuple(MaintenanceWindow(a, b, mode) for a, b, mode in settings.windows),
            override=steady.override,
            queued_ahead=queued_ahead,
            storm_reason=steady.storm_reason,
        )

    # -- forward steps ----------------------------------------------------------------------------

    async def _forward(
        self, rem: Remediation, *, admitted: bool = False, begun: PreparedStep | None = None
    ) -> timedelta | None:
        """One forward step. `admitted`: the guardrails admitted the remediation just before, in this drive, with
        the pause flag read under the admission lock in the admitting transaction; the first step does not read
        it again (the flag can change at any moment either way: the check stops a mutating step that starts
        after the pause is seen, and here it was seen at the commit just before). `begun`: that admission
        began the first step (engine/first_step.py)."""
        playbook = playbook_of(rem)
        idx = rem.current_step
        if idx >= len(playbook.steps):
            await self._finish(rem, playbook)
            return None
        step = playbook.steps[idx]
        action = self.rt.actions.get(step.action)
        hold = None if admitted else await self._hold(rem, action is None or action.mutating)
        if hold is not None:
            reason, guardrail = hold
            await move(self.rt, rem.id, Event.HOLD, reason=reason, owner=self.rt.owner, data={"guardrail": guardrail})
            return None
        # Forward steps run in order from 0 and an undo has its own phase: before the first step there is no
        # earlier step whose output a template or condition could read, so the rows need no reading.
        rows: list[StepRow] | None = [] if idx == 0 else None
        try:
            end = await self._attempt(
                rem, step, idx, phase="forward", name=step.name, rows=rows,
                begun=begun if begun is not None and begun.begin.idx == idx else None,
            )
        except GateUnknown as unknown:
            return await self._gate_unknown(rem, step, idx, "forward", step.name, unknown)
        except ResumeLater as later:
            return timedelta(seconds=later.delay)
        except CancelRemediation as cancel:
            await self._step_cancelled(rem, step, idx, cancel)
            return None
        if end is not None:
            await self._step_failed(rem, step, idx, end.error, end.params, output=end.output)
        return None

    async def _attempt(
        self, rem: Remediation, step: Step, idx: int, *, phase: str, name: str, rows: list[StepRow] | None,
        begun: PreparedStep | None = None,
    ) -> _StepEnd | None:
        """One step of the playbook (`forward`) or of its return gate (`revert`): the step error boundary.

        Stages run in order (condition, approval for a forward step, template, parameters, action, output);
        an error in one fails the step as `<stage> error: ...`. None when the step settled (done and recorded,
        skipped, or waiting for an approval); else how it failed. ResumeLater, CancelRemediation and the
        store's signals reach the caller. `rows`: the remediation's step rows, read here when None. `begun`:
        the step as its admission prepared and began it (engine/first_step.py): the action runs at once."""
        action = self.rt.actions.get(step.action)
        stage, rendered = "condition", {}
        timeout = step.timeout.total_seconds()
        try:
            rows = await self.rt.repo.steps(rem.id) if rows is None else rows
            if begun is not None:
                stage, rendered, action = "action", begun.begin.params, begun.action
                params, ctx = begun.params, begun.ctx
                ctx.progress = dict(begun.begin.progress or {})  # as the admission stored it with the new row
            else:
                variables = self._variables(rem, rows)
                if not step_applies(step, variables):
                    await self._step_skipped(rem, phase, idx, name, step)
                    return None
                if phase == "forward":
                    stage = "approval"
                    if await self._needs_approval(rem, step, idx):
                        await self._request_approval(rem, step, idx)
                        return None
                stage = "template"
                rendered = self._render(step.params, variables)
                stage = "parameters"
                if action is None:
                    raise LookupError(f"unknown action {step.action!r}")
                params = action.parse(rendered)
                stage = "action"
                ctx = self._context(rem, name, timeout, phase, idx, {}, None)
                row = await self.rt.repo.begin_step(
                    rem.id, self.rt.owner, phase=phase, idx=idx, name=name, action=step.action, params=rendered,
                    progress=await self._observe(action, ctx, params),
                )
                ctx.progress = dict(row.progress or {})  # as stored: a resumed step's own, else what was observed
            outcome = await self._run(action, ctx, params, timeout, retries=step.retries)
            if isinstance(outcome, StepFailure):
                return _StepEnd(outcome.error, outcome.output, rendered)
            stage = "output"
            await self._step_done(rem, phase, idx, name, step.action, ctx, outcome)
            if phase == "forward" and action.quarantines and not ctx.dry_run and (
                self._quarantine_started(rem, rows) is None
            ):
                started = alert_started(rem)
                self.rt.metrics.time_to_quarantine.labels(playbook=rem.playbook).observe(
                    max(0.0, (self.rt.repo._clock() - started).total_seconds())
                )
            return None
        except ResumeLater:
            # It looks again later: that look resumes this step and is not a new start in the timeline.
            await self.rt.repo.note_step_waiting(rem.id, self.rt.owner, phase=phase, idx=idx)
            raise
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            return _StepEnd(f"{stage} error: {failure_reason(exc)}", None, rendered)

    async def _observe(self, action: AnyAction, ctx: ActionContext, params: Any) -> dict[str, Any] | None:
        """What the action observes before its step begins (`Action.observe`); None in a dry run or when the
        read fails (the action then reads and checkpoints it itself, under its retries and timeout)."""
        if ctx.dry_run:
            return None
        try:
            return await action.observe(ctx, params)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            ctx.observed = None
            log.debug("step %s of remediation %s: observing before it begins failed", ctx.step_name,
                      ctx.remediation_id, exc_info=True)
            retry_after = getattr(exc, "retry_after", None) if is_transient(exc) else None
            if retry_after:  # the action reads again next: not sooner than the API server asked
                await asyncio.sleep(min(float(retry_after), self.rt.settings.transient_budget_s))
            return None

    async def _step_done(
        self, rem: Remediation, phase: str, idx: int, name: str, action: str, ctx: ActionContext,
        outcome: ActionResult,
    ) -> None:
        """Record a step (forward, gate or undo) that did its work: `planned` when it only described it."""
        await self.rt.repo.finish_step(
            rem.id, self.rt.owner, phase=phase, idx=idx, name=name, action=action,
            status="planned" if ctx.dry_run and self.rt.kube is None else "succeeded",
            output={"changed": outcome.changed, "message": outcome.message, **outcome.output},
        )
        if getattr(self.rt.actions.get(action), "gate", False) and not ctx.dry_run:
            await self._gate_passed(rem, name, ctx.progress.get(GATE_UNKNOWN))

    async def _step_skipped(self, rem: Remediation, phase: str, idx: int, name: str, step: Step) -> None:
        await self.rt.repo.finish_step(
            rem.id, self.rt.owner, phase=phase, idx=idx, name=name, action=step.action,
            status="skipped", output={"reason": f"when: {step.when} is false"},
        )

    async def _step_cancelled(self, rem: Remediation, step: Step, idx: int, cancel: CancelRemediation) -> None:
        """A step ended the remediation (e.g. `wait` saw the alert resolve): cancel, and undo what was done."""
        await self.rt.repo.finish_step(
            rem.id, self.rt.owner, phase="forward", idx=idx, name=step.name, action=step.action,
            status="cancelled", output={"message": cancel.reason, **cancel.output}, advance=False,
        )
        await move(self.rt, rem.id, Event.CANCEL, reason=cancel.reason, owner=self.rt.owner)
        if cancel.revert and self.revert_plan(playbook_of(rem), await self.rt.repo.steps(rem.id)):
            await move(self.rt, rem.id, Event.REVERT, reason=cancel.reason)

    async def _run(
        self, action: AnyAction, ctx: ActionContext, params: Any, timeout: float, *, retries: int | None = None
    ) -> ActionResult | StepFailure:
        """The action's result, or why it failed (any error but the engine's and the store's signals).
        `retries`: the step's setting (0: no budget for transient errors, see `transient_policy`)."""
        started = time.perf_counter()
        if ctx.dry_run and self.rt.kube is None:
            result = ActionResult(
                changed=False, message="plan-only: " + action.describe(ctx.target, params),
                output={"planned": True},
            )
            self.rt.metrics.step_duration.labels(action=action.name, outcome="planned").observe(0)
            return result
        try:
            policy = transient_policy(self.rt.settings, retries)
            result = await run_with_retries(action, ctx, params, timeout=timeout, policy=policy)
        except _PASS_THROUGH:
            raise
        except Exception as exc:  # an ActionError, or an unexpected error (e.g. a peer's malformed answer)
            self.rt.metrics.step_duration.labels(action=action.name, outcome="failed").observe(
                time.perf_counter() - started
            )
            if not isinstance(exc, ActionError):
                log.warning("step %s of remediation %s failed unexpectedly", ctx.step_name, ctx.remediation_id,
                            exc_info=True)
            return StepFailure(failure_reason(exc), dict(getattr(exc, "output", None) or {}))
        self.rt.metrics.step_duration.labels(action=action.name, outcome="succeeded").observe(
            time.perf_counter() - started
        )
        return result

    async def _step_failed(
        self, rem: Remediation, step: Step, idx: int, error: str, params: Mapping[str, Any],
        output: dict[str, Any] | None = None,
    ) -> None:
        if step.on_failure == "continue":
            await self.rt.repo.finish_step(
                rem.id, self.rt.owner, phase="forward", idx=idx, name=step.name, action=step.action,
                status="failed", output=output, error=error, extra={"on_failure": "continue"},
            )
            await self._notify(rem, "step_failed", f"Step *{step.name}* ({step.action}) failed: {error}\n"
                                                   "The playbook says continue.")
            return
        await self._notify(rem, "step_failed", f"Step *{step.name}* ({step.action}) failed: {error}")
        await self.rt.repo.finish_step(
            rem.id, self.rt.owner, phase="forward", idx=idx, name=step.name, action=step.action,
            status="failed", output=output, error=error, advance=False,
        )
        await move(self.rt, rem.id, Event.FAIL, reason=f"step {step.name} failed: {error}", owner=self.rt.owner,
                   detail=error)
        action = self.rt.actions.get(step.action)
        if action is not None and action.gate:
            await self._escalate(rem, output or {}, f"step {step.name} failed: {error}")

    async def _finish(self, rem: Remediation, playbook: Playbook) -> None:
        reason = "plan-only: nothing was changed" if self.rt.plan_only else "all steps done"
        still = rem.quarantined and await self._node_still_quarantined(rem)
        ending = Event.PLAN if self.rt.plan_only else Event.SUCCEED  # plan-only runs end `planned`
        fresh = await move(self.rt, rem.id, ending, reason=reason, owner=self.rt.owner,
                           changes={"quarantined": still})
        if rem.quarantined and not still:
            await self.rt.repo.wake_held()  # the playbook lifted its own quarantine: room for held ones
            self._observe_return(rem, await self.rt.repo.steps(rem.id))
        if fresh.alert_resolved and playbook.on_resolved == "revert":
            await move(self.rt, rem.id, Event.REVERT, reason="alert resolved while running")

    async def _node_still_quarantined(self, rem: Remediation) -> bool:
        """Does the node still carry this controller's quarantine (taint, or cordon it made)?

        A playbook may lift its own quarantine (reset-gpu untaints after a good reset); such a node must
        not count against MAX_QUARANTINED_NODES any more. Unknown (no cluster, API error) counts as yes.
        """
        if self.rt.plan_only:
            return False
        if self.rt.kube is None or not rem.node:
            return True
        try:
            node = await self.rt.kube.get_node(rem.node)
        except ActionError:
            return True
        for row in await self.rt.repo.steps(rem.id):
            action = self.rt.actions.get(row.action)
            if (
                row.phase == "forward" and row.status == "succeeded" and action is not None and action.quarantines
                and action.still_holds(node, row.params, rem.id)
            ):
                return True
        return False

    def _quarantine_started(self, rem: Remediation, rows: list[StepRow]) -> datetime | None:
        """When the first quarantining forward step of this remediation finished, if one did."""
        done = [
            r.finished_at for r in rows
            if r.phase == "forward" and r.status == "succeeded" and r.finished_at is not None
            and getattr(self.rt.actions.get(r.action), "quarantines", False)
        ]
        return utc(min(done)) if done else None

    def _observe_return(self, rem: Remediation, rows: list[StepRow]) -> None:
        started = self._quarantine_started(rem, rows) or utc(rem.created_at)
        self.rt.metrics.time_to_return.labels(playbook=rem.playbook).observe(
            max(0.0, (utc(self.rt.repo._clock()) - started).total_seconds())
        )

    # -- approvals (the token and page live in the approval service) ------------------------------

    async def _needs_approval(self, rem: Remediation, step: Step, idx: int) -> bool:
        required = approval_required(step, idx, plan_of(rem).require_approval)
        if not required:
            return False
        return not step_approved(rem, await self.rt.repo.current_approval(rem.id), idx)

    async def _request_approval(self, rem: Remediation, step: Step, idx: int) -> None:
        await Approvals(self.rt).request(rem, step, idx)

    # -- reverts ----------------------------------------------------------------------------------

    def revert_plan(self, playbook: Playbook, rows: list[StepRow]) -> list[RevertStep]:
        """The undo of every forward step that changed something, newest first.

        A default undo takes the forward step's stored, already rendered parameters as they are (only the
        keys the undo action accepts); they are data and are never rendered again. An explicit `revert:`
        keeps its playbook templates, rendered once when the undo runs.
        """
        by_name = {s.name: s for s in playbook.steps}
        plan: list[RevertStep] = []
        done = [r for r in rows if r.phase == "forward" and r.status in ("succeeded", "running")]
        for row in sorted(done, reverse=True, key=lambda r: r.idx):
            step = by_name.get(row.name)
            if step is None or step.revert is False:
                continue
            if step.revert is not None:
                plan.append(RevertStep(row, step.revert.action, dict(step.revert.params), templated=True))
                continue
            action = self.rt.actions.get(row.action)
            revert_action = self.rt.actions.get(action.default_revert) if action and action.default_revert else None
            if action is None or action.default_revert is None or revert_action is None:
                continue
            fields = revert_action.Params.model_fields
            params = {k: v for k, v in row.params.items() if k in fields}
            plan.append(RevertStep(row, action.default_revert, params, templated=False))
        return plan

    async def _revert(self, rem: Remediation) -> timedelta | None:
        playbook = playbook_of(rem)
        rows = await self.rt.repo.steps(rem.id)
        idx = rem.current_step
        gate = playbook.return_gate
        returning = rem.return_request  # a person's forced return (domain/returns.py)
        if idx < len(gate):  # proof before return to service: nothing is undone until every gate step passed
            step = gate[idx]
            kind = gate_step_kind(step.action, bool(getattr(self.rt.actions.get(step.action), "gate", False)))
            if returning and kind is not None and kind in skip_of(returning):
                await self.rt.repo.finish_step(
                    rem.id, self.rt.owner, phase="revert", idx=idx, name=f"gate:{step.name}", action=step.action,
                    status="skipped", output={"reason": skipped_note(returning, kind), "skip": kind},
                    extra={"by": returning.get("actor")},
                )
                return None
            return await self._gate(rem, step, idx, rows)
        plan = self.revert_plan(playbook, rows)
        if idx >= len(gate) + len(plan):
            if returning:
                await move(self.rt, rem.id, Event.RETURNED, reason=returned_reason(returning), owner=self.rt.owner,
                           actor=str(returning.get("actor") or "controller"), changes={"quarantined": False},
                           data={"return": {k: returning.get(k) for k in ("actor", "reason", "skip", "from")}})
            else:
                await move(self.rt, rem.id, Event.REVERTED, reason="prior state restored", owner=self.rt.owner,
                           changes={"quarantined": False})
            if rem.quarantined:
                self._observe_return(rem, rows)
            await self.rt.repo.wake_held()  # quarantine room may have freed
            return None
        undo = plan[idx - len(gate)]
        forward, action_name = undo.forward, undo.action
        action = self.rt.actions.get(action_name)
        if (action is None or action.mutating) and not returning:  # a person's return is itself the override
            # The kill switch and a pause scoped to it stop an undo too, before its next mutating step.
            if await self._paused() or held_by(await self.rt.repo.active_pauses(), rem.node,
                                               await self._live_labels(rem), rem.playbook) is not None:
                if rem.state_reason != REVERT_PAUSED:
                    await self.rt.repo.note_revert_pause(rem.id, self.rt.owner, paused=True, reason=REVERT_PAUSED)
                return self.rt.settings.held_recheck_interval
            if rem.state_reason == REVERT_PAUSED:
                await self.rt.repo.note_revert_pause(rem.id, self.rt.owner, paused=False, reason=REVERT_RESUMED)
        name = f"revert:{forward.name}"
        # The step error boundary, as for forward steps.
        stage, rendered = "template", dict(undo.params)
        outcome: ActionResult | StepFailure | str
        try:
            if undo.templated:
                rendered = self._render(undo.params, self._variables(rem, rows))
            stage = "parameters"
            if action is None:
                raise LookupError(f"unknown action {action_name!r}")
            params = action.parse(rendered)
            stage = "action"
            row = await self.rt.repo.begin_step(
                rem.id, self.rt.owner, phase="revert", idx=idx, name=name, action=action_name, params=rendered
            )
            ctx = self._context(rem, name, 600.0, "revert", idx, row.progress, forward.output)
            outcome = await self._run(action, ctx, params, 600.0)
            if isinstance(outcome, ActionResult):
                stage = "output"
                await self._step_done(rem, "revert", idx, name, action_name, ctx, outcome)
                return None
        except ResumeLater as later:  # e.g. a `wait` named in `revert:`
            return timedelta(seconds=later.delay)
        except CancelRemediation as cancel:
            outcome = f"an undo cannot cancel its remediation: {cancel.reason}"
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            outcome = f"{stage} error: {failure_reason(exc)}"
        error = outcome.error if isinstance(outcome, StepFailure) else str(outcome)
        await self._revert_failed(rem, forward, idx, action_name, error)
        return None

    async def _gate(self, rem: Remediation, step: Step, idx: int, rows: list[StepRow]) -> timedelta | None:
        """One step of the playbook's `return_gate`: it passes, waits (ResumeLater, with its reason said once
        in the audit log, the UI and a notification), or refuses the return (the quarantine stays)."""
        name = f"gate:{step.name}"
        action = self.rt.actions.get(step.action)
        try:
            end = await self._attempt(rem, step, idx, phase="revert", name=name, rows=rows)
        except GateUnknown as unknown:
            return await self._gate_unknown(rem, step, idx, "revert", name, unknown)
        except ResumeLater as later:
            if later.reason and later.reason != rem.state_reason:
                await self.rt.repo.note_return_waiting(rem.id, self.rt.owner, later.reason)
                await self._notify(rem, "return_waiting", later.reason)
            return timedelta(seconds=later.delay)
        except CancelRemediation as cancel:
            end = _StepEnd(f"a gate step cannot cancel its remediation: {cancel.reason}", None, {})
        if end is None:
            return None
        failure = StepFailure(end.error, end.output or {})
        await self._notify(rem, "step_failed", f"Gate step *{step.name}* ({step.action}) failed: {failure.error}")
        if step.on_failure == "continue":
            await self.rt.repo.finish_step(
                rem.id, self.rt.owner, phase="revert", idx=idx, name=name, action=step.action, status="failed",
                output=failure.output, error=failure.error, extra={"on_failure": "continue"},
            )
            return None
        await self.rt.repo.finish_step(
            rem.id, self.rt.owner, phase="revert", idx=idx, name=name, action=step.action, status="failed",
            output=failure.output, error=failure.error, advance=False,
        )
        reason = f"return to service refused: gate {step.name} failed: {failure.error}; the quarantine stays"
        await move(self.rt, rem.id, Event.REVERT_FAILED, reason=reason, owner=self.rt.owner,
                   data={"gate": step.name}, outcome="return_refused", notice="return_refused")
        if action is not None and action.gate:
            await self._escalate(rem, failure.output, f"gate {step.name} failed: {failure.error}")
        return None

    async def _escalate(self, rem: Remediation, gate: Mapping[str, Any], why: str) -> None:
        """A GPU that failed its validation goes to the next rung of the escalation ladder: only when a GPU that
        could be read failed a named check (`verdict: fail`). A gate step that failed for another reason (its
        template, its parameters) says nothing about the GPU and leaves the ladder alone."""
        if gate.get("verdict") != "fail":
            log.warning("remediation %s: gate failed without a GPU verdict (%s); not escalated", rem.id, why)
            return
        self.rt.metrics.gate_verdicts.labels(playbook=rem.playbook, verdict="failed").inc()
        new_id = await Ladder(self.rt).after_failed_gate(rem, gate, why)
        if new_id is not None:
            await self._notify(rem, "escalated", f"escalated to remediation {new_id}: {why}")

    async def _gate_unknown(
        self, rem: Remediation, step: Step, idx: int, phase: str, name: str, unknown: GateUnknown
    ) -> timedelta:
        """A gate step with no verdict (the node agent unreachable, an error answer, a timeout, unreadable GPUs).

        Not a failure: the step stays where it is and the node stays quarantined; it is looked at again after
        a backoff that doubles from GATE_UNKNOWN_BACKOFF_S to GATE_UNKNOWN_BACKOFF_MAX_S (counted in the step's
        progress, so a restart or another replica goes on with it). The state reason and the timeline say
        `gate unknown: agent <host:port> <symptom> since <time>`; a person is paged once per spell (not per
        look) and told again when it recovers. The ladder is never climbed from here."""
        settings = self.rt.settings
        now = utc(self.rt.repo._clock())
        row = next((r for r in await self.rt.repo.steps(rem.id) if r.phase == phase and r.idx == idx), None)
        spell = dict(((row.progress or {}) if row is not None else {}).get(GATE_UNKNOWN) or {})
        first = not spell
        looks = int(spell.get("looks") or 0) + 1
        since = str(spell.get("since") or now.strftime("%Y-%m-%dT%H:%M:%SZ"))
        delay = min(settings.gate_unknown_backoff_max_s, settings.gate_unknown_backoff_s * 2 ** min(looks - 1, 30))
        spell.update(since=since, looks=looks, agent=unknown.agent, symptom=unknown.symptom, detail=unknown.detail)
        reason = f"{unknown.reason} since {since}: {unknown.detail}"[:_MAX_REASON]
        self.rt.metrics.gate_verdicts.labels(playbook=rem.playbook, verdict="unknown").inc()
        await self.rt.repo.note_gate_unknown(
            rem.id, self.rt.owner, phase=phase, idx=idx, spell=spell, reason=reason,
            changed=reason != rem.state_reason,
        )
        if first:
            log.warning("remediation %s: %s; the node stays quarantined, looked at again in %gs", rem.id, reason,
                        delay)
            await self._notify(rem, "gate_unknown", (
                f"The validation gate ({step.name}) of node {rem.node or rem.target_key} has no verdict: its node "
                f"agent {unknown.agent} {unknown.symptom}. Could not read: {unknown.detail}\n"
                f"The node stays quarantined and does not escalate; the gate is tried again with backoff (at most "
                f"every {settings.gate_unknown_backoff_max_s:g}s). Check the agent's pod and the network path to "
                f"{unknown.agent}."
            ))
        return timedelta(seconds=delay)

    async def _gate_passed(self, rem: Remediation, name: str, spell: Any) -> None:
        """A gate step passed: counted, and after an unknown spell the person paged hears it recovered."""
        self.rt.metrics.gate_verdicts.labels(playbook=rem.playbook, verdict="passed").inc()
        if not isinstance(spell, Mapping):
            return
        await self._notify(rem, "gate_recovered", (
            f"The node agent {spell.get('agent')} of node {rem.node or rem.target_key} answers again (gate "
            f"{name} had no verdict since {spell.get('since')}, {spell.get('looks')} look(s)); the gate passed."
        ))

    async def _revert_failed(self, rem: Remediation, forward: StepRow, idx: int, action: str, error: str) -> None:
        await self._notify(rem, "step_failed", f"Undo of step *{forward.name}* ({action}) failed: {error}")
        await self.rt.repo.finish_step(
            rem.id, self.rt.owner, phase="revert", idx=idx, name=f"revert:{forward.name}", action=action,
            status="failed", error=error, advance=False,
        )
        await move(self.rt, rem.id, Event.REVERT_FAILED, reason=f"revert of {forward.name} failed: {error}",
                   owner=self.rt.owner, detail=error, outcome="revert_failed")

    # -- helpers ----------------------------------------------------------------------------------

    def _variables(self, rem: Remediation, rows: list[StepRow]) -> dict[str, Any]:
        outputs = {r.name: r.output for r in rows if r.phase == "forward" and r.status == "succeeded"}
        plan = plan_of(rem)
        return build_variables(
            alert=plan.alert, target=target_of(rem), params=rem.params, context=rem.context, steps=outputs,
            xid=plan.xid_json, escalation=plan.escalation_json,
        )

    @staticmethod
    def _render(params: Mapping[str, Any], variables: Mapping[str, Any]) -> dict[str, Any]:
        return render_params(params, variables)

    def context_for(self, rem: Remediation, name: str, prior: Mapping[str, Any] | None) -> ActionContext:
        """An undo action's context outside the remediation's steps (a release's clean-up: engine/hand_changes.py)."""
        return self._context(rem, name, 60.0, "revert", rem.current_step, {}, prior)

    def _context(
        self, rem: Remediation, step_name: str, timeout: float, phase: str, idx: int, progress: dict[str, Any],
        prior: Mapping[str, Any] | None,
    ) -> ActionContext:
        repo, owner = self.rt.repo, self.rt.owner

        async def checkpoint(data: dict[str, Any]) -> None:
            await repo.checkpoint_step(rem.id, owner, phase=phase, idx=idx, progress=data)

        async def resolved() -> bool:
            fresh = await repo.get(rem.id)
            return bool(fresh and fresh.alert_resolved)

        return ActionContext(
            remediation_id=rem.id, step_name=step_name, target=target_of(rem), settings=self.rt.settings,
            dry_run=self.rt.plan_only, kube=self.rt.kube, sidecar=self.rt.sidecar, notifier=self.rt.notifier,
            timeout=timeout, prior_output=prior, progress=dict(progress or {}), checkpoint=checkpoint,
            alert={"labels": rem.alert_labels, "annotations": rem.alert_annotations, "name": rem.alertname,
                   "fingerprint": rem.alert_fingerprint},
            alert_starts_at=alert_of(rem).starts_at, gathered=rem.context, alert_resolved=resolved,
        )

    async def _paused(self) -> bool:
        flag = await self.rt.repo.get_flag(PAUSE_FLAG)
        return bool(flag and flag.get("paused"))

    async def _live_labels(self, rem: Remediation) -> dict[str, str] | None:
        """The node's labels as they are now (one read), else those of the context read; None without a node."""
        if not rem.node:
            return None
        if self.rt.kube is not None:
            try:
                node = await self.rt.kube.get_node(rem.node)
                return dict((node.get("metadata") or {}).get("labels") or {})
            except ActionError as exc:
                log.info("remediation %s: reading node %s's labels failed (%s); using the context's", rem.id,
                         rem.node, exc)
        return dict((rem.context.get("node") or {}).get("labels") or {})

    async def _hold(self, rem: Remediation, mutating: bool) -> tuple[str, str] | None:
        """Before a forward step: (reason, guardrail) when it must wait. The kill switch and the scoped pauses hold
        a step that changes something; the opt-out label, read from the node now, holds every step."""
        if mutating and await self._paused():
            return "controller is paused", "paused"
        labels = await self._live_labels(rem)
        if labels is not None and excluded(labels):
            return f"node {rem.node} is labelled {EXCLUDE_LABEL}=true (opted out)", "opt_out"
        if mutating:
            scoped = held_by(await self.rt.repo.active_pauses(), rem.node, labels, rem.playbook)
            if scoped is not None:
                return scoped.describe(), "paused"
        return None

    async def _notify(self, rem: Remediation | str, event: str, detail: str) -> None:
        await notify(self.rt, rem if isinstance(rem, str) else rem.id, event, detail)
