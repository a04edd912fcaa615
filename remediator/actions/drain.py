"""Drain: cordon the node, then evict its workload pods through the Eviction API and wait until they are gone.

Evictions respect PodDisruptionBudgets (a 429 is retried with backoff until the drain's deadline), carry
the pod's UID as a precondition so a same-name replacement is never evicted by mistake, and are
checkpointed one by one so that a crash and resume never evicts a pod twice. DaemonSet and mirror pods,
finished pods and pods of excluded namespaces are left alone, as `kubectl drain` does.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import Field, field_validator

from remediator.actions.base import Action, ActionContext, ActionResult, StrictParams, planned
from remediator.actions.context import uses_gpu
from remediator.actions.node import cordon_node, cordoned_by, require_kube, target_node
from remediator.adapters.kube import KubeAdapter, KubeObject, TokenBucket
from remediator.domain.durations import DurationText, parse_duration
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import ActionError, Conflict, NotFound, PermanentError, StepFailed, TemporaryError
from remediator.kube.views import Body, Pod, as_mapping, json_object
from remediator.kube.vocabulary import EXCLUDE_LABEL
from remediator.retrying import Backoff, until_deadline

__all__ = ["Drain", "DrainParams", "DrainPlan", "PodRef", "plan_drain"]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED_PHASES = ("Succeeded", "Failed")


class DrainParams(StrictParams):
    pods: str = "gpu"
    grace_period: int | None = Field(default=None, ge=0)
    timeout: DurationText = "10m"
    skip_namespaces: list[str] = Field(default_factory=list)

    @field_validator("pods")
    @classmethod
    def _pods(cls, value: str) -> str:
        if not re.fullmatch(r"all|gpu|gpu:\S+|instance:[^\s/]+/[0-9]+", value):
            raise ValueError(
                f'pods must be "all", "gpu", "gpu:<uuid>" or "instance:<uuid>/<gpu instance id>", got {value!r}'
            )
        return value


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, pod: Mapping[str, object]) -> PodRef:
        meta = Body(pod).metadata
        return cls(str(meta.namespace), str(meta.name), str(meta.uid))

    def as_dict(self) -> JsonObject:
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid}

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class DrainPlan:
    evict: list[tuple[PodRef, int | None]] = field(default_factory=list)
    wait: list[PodRef] = field(default_factory=list)
    skipped: list[JsonObject] = field(default_factory=list)
    note: str | None = None


def _is_daemonset_pod(pod: Mapping[str, object]) -> bool:
    return any(r.kind == "DaemonSet" and r.controller for r in Pod(pod).owner_references)


def _listed(context: Mapping[str, object], key: str, name: str) -> list[Mapping[str, object]] | None:
    mapping = context.get(key)
    found = mapping.get(name) if isinstance(mapping, Mapping) else None
    return [e for e in found if isinstance(e, Mapping)] if isinstance(found, list) else None


def _gpu_selection(selection: str, context: Mapping[str, object]) -> tuple[set[str] | None, str | None]:
    """For "gpu:<uuid>": identities (uid or namespace/name) of that GPU's pods; None falls back to "gpu".

    For "instance:<uuid>/<N>": the pods of that MIG GPU instance (context `instance_pods`, engine/gpu_instance.py);
    unknown, the GPU's pods instead, and every GPU pod of the node when those are unknown too."""
    note = None
    if selection.startswith("instance:"):
        uuid, gpu_instance = selection.split(":", 1)[1].rsplit("/", 1)
        key = f"{uuid}/{int(gpu_instance)}"  # the instance as engine/gpu_instance.py keys it: `05` is 5
        listed = _listed(context, "instance_pods", key)
        if listed is not None:
            return _identities(listed), None
        why = context.get("gpu_instance_error") or "no instance_pods in context"
        note = f"pods of GPU instance {key} unknown ({why}): drained the pods of GPU {uuid} instead"
        selection = f"gpu:{uuid}"
    if not selection.startswith("gpu:"):
        return None, None
    uuid = selection.split(":", 1)[1]
    listed = _listed(context, "gpu_pods", uuid)
    if listed is None:
        return None, f"pods of GPU {uuid} unknown (no gpu_pods in context): drained every GPU pod instead"
    return _identities(listed), note


def _identities(listed: list[Mapping[str, object]]) -> set[str]:
    identities = set()
    for entry in listed:
        if entry.get("uid"):
            identities.add(str(entry["uid"]))
        identities.add(f"{entry.get('namespace')}/{entry.get('name')}")
    return identities


def _skip_reason(
    pod: Mapping[str, object], excluded: set[str], selection: str, gpu_pods: set[str] | None
) -> str | None:
    view = Pod(pod)
    ref = PodRef.of(pod)
    if ref.namespace in excluded:
        return "namespace excluded"
    if MIRROR_ANNOTATION in view.annotations:
        return "mirror pod"
    if _is_daemonset_pod(pod):
        return "DaemonSet pod"
    if view.phase in FINISHED_PHASES:
        return "completed"
    if gpu_pods is not None:
        if ref.uid in gpu_pods or str(ref) in gpu_pods:
            return None
        if selection.startswith("instance:"):
            return f"not on GPU instance {selection.split(':', 1)[1]}"
        return f"not on GPU {selection[4:]}"
    if selection != "all" and not uses_gpu(pod):
        return "uses no GPU"
    return None


def _grace(requested: int | None, pod: Mapping[str, object]) -> int | None:
    if requested is None:
        return None
    own = Pod(pod).pod_spec.termination_grace_period_seconds
    return requested if own is None else min(requested, own)


OPT_OUT = EXCLUDE_LABEL


async def opted_out_namespaces(kube: KubeAdapter, pods: list[KubeObject]) -> set[str]:
    """Namespaces of these pods that carry the opt-out label or annotation remediator.io/exclude=true."""
    out: set[str] = set()
    for namespace in sorted({PodRef.of(pod).namespace for pod in pods}):
        try:
            meta = Body(await kube.get_namespace(namespace)).metadata
        except NotFound:
            continue
        marks = {**meta.labels, **meta.annotations}
        if marks.get(OPT_OUT) == "true":
            out.add(namespace)
    return out


def plan_drain(
    pods: list[KubeObject], params: DrainParams, ctx: ActionContext, done: set[str], opted_out: set[str]
) -> DrainPlan:
    """Sort the node's pods into: evict (with grace), wait for (terminating or evicted before), skipped."""
    settings = ctx.settings
    excluded = {*settings.excluded_namespaces, *params.skip_namespaces, *opted_out}
    if settings.own_namespace:
        excluded.add(settings.own_namespace)
    gpu_pods, note = _gpu_selection(params.pods, ctx.gathered)
    plan = DrainPlan(note=note)
    for pod in pods:
        ref = PodRef.of(pod)
        reason = _skip_reason(pod, excluded, params.pods, gpu_pods)
        if reason is not None:
            plan.skipped.append({**ref.as_dict(), "reason": reason})
        elif Pod(pod).deletion_timestamp or ref.uid in done:
            plan.wait.append(ref)
        else:
            plan.evict.append((ref, _grace(params.grace_period, pod)))
    return plan


class _Evictor:
    """Evicts pods concurrently under the eviction rate limit, checkpointing each accepted eviction."""

    def __init__(self, kube: KubeAdapter, ctx: ActionContext, deadline: float, drain: Drain) -> None:
        self.kube = kube
        self.ctx = ctx
        self.deadline = deadline
        self.drain = drain
        self.bucket = TokenBucket(ctx.settings.eviction_qps)
        self.evicted: dict[str, JsonObject] = {
            str(uid): json_object(as_mapping(ref)) for uid, ref in as_mapping(ctx.progress.get("evicted")).items()
        }
        self.blocked: dict[str, str] = {}
        self.failures: list[ActionError] = []
        self._lock = asyncio.Lock()

    def _left(self) -> float:
        return self.deadline - asyncio.get_running_loop().time()

    async def evict_all(self, targets: list[tuple[PodRef, int | None]]) -> None:
        """Evict concurrently; an unexpected error (a failed checkpoint) stops every other eviction."""
        try:
            async with asyncio.TaskGroup() as group:
                for ref, grace in targets:
                    group.create_task(self._evict(ref, grace))
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None

    def _waits(self) -> Callable[[BaseException], float]:
        """One pod's waits: the server's Retry-After (a PDB's 429), else exponential backoff counted over the
        failures of one kind in a row (remediator.retrying.Backoff), so the first PDB 429 after an API outage
        waits its usual second, not the outage's grown backoff; while the API cannot be reached the wait stays
        under TRANSIENT_BACKOFF_MAX_S, so its return is noticed within seconds. Never past the deadline."""
        backoff = Backoff(self.drain.backoff_initial, self.drain.backoff_max, jitter=False)
        unreachable_cap = self.ctx.settings.transient_backoff_max_s

        def wait(exc: BaseException) -> float:
            seconds = backoff.next(exc)
            if getattr(exc, "status", None) is None and not getattr(exc, "retry_after", None):
                seconds = min(seconds, unreachable_cap)
            return max(0.0, min(seconds, self._left()))

        return wait

    def _blocked(self, ref: PodRef) -> Callable[[BaseException], None]:
        def note(exc: BaseException) -> None:
            if isinstance(exc, TemporaryError):
                self.blocked[ref.uid] = exc.message
        return note

    async def _evict(self, ref: PodRef, grace: int | None) -> None:
        """Evict one pod, retrying what may pass later (a PDB's 429, 5xx) until the drain's deadline."""
        retrying = until_deadline(self._left, self._waits(), after=self._blocked(ref))
        try:
            async for attempt in retrying:
                with attempt:
                    await self.bucket.acquire()
                    await self.kube.evict_pod(ref.namespace, ref.name, grace_period_seconds=grace, uid=ref.uid)
        except (NotFound, Conflict):
            return  # gone already, or replaced by a new pod of the same name
        except TemporaryError:
            return  # still blocked at the deadline: `blocked` says why
        except PermanentError as exc:
            self.failures.append(exc)
            return
        self.blocked.pop(ref.uid, None)
        await self._record(ref)

    async def _record(self, ref: PodRef) -> None:
        async with self._lock:
            self.evicted[ref.uid] = ref.as_dict()
            self.ctx.progress["evicted"] = dict(self.evicted)
            await self.ctx.checkpoint(dict(self.ctx.progress))


class Drain(Action[DrainParams]):
    """Cordon, then evict the node's (GPU) pods and wait until they are gone or replaced."""

    name = "drain"
    Params = DrainParams
    quarantines = True
    default_revert = "uncordon"

    def still_holds(self, node: Mapping[str, object], params: Mapping[str, object], remediation_id: str) -> bool:
        """The drain's cordon is still this remediation's."""
        return cordoned_by(node, remediation_id)

    def __init__(
        self, *, poll_interval: float = 1.0, backoff_initial: float = 1.0, backoff_max: float = 30.0
    ) -> None:
        self.poll_interval = poll_interval
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max

    async def apply(self, ctx: ActionContext, params: DrainParams) -> ActionResult:
        p = params
        node = target_node(ctx)
        kube = require_kube(ctx)
        deadline = asyncio.get_running_loop().time() + parse_duration(p.timeout).total_seconds()
        cordon_output, cordoned = await cordon_node(ctx, kube, node)
        evictor = _Evictor(kube, ctx, deadline, self)
        pods = await kube.list_pods_on_node(node)
        plan = plan_drain(pods, p, ctx, set(evictor.evicted), await opted_out_namespaces(kube, pods))
        await evictor.evict_all(plan.evict)
        if evictor.failures:
            raise evictor.failures[0]
        watched = [*plan.wait, *(ref for ref, _ in plan.evict)]
        remaining = await self._wait_gone(kube, node, watched, deadline)
        output: JsonObject = {
            **cordon_output,
            "selection": p.pods,
            "evicted": list[JsonValue](evictor.evicted.values()),
            "skipped": list[JsonValue](plan.skipped),
            "remaining": [
                {**r.as_dict(), "blocked_by": evictor.blocked.get(r.uid, "still terminating")}
                for r in remaining
            ],
        }
        if plan.note:
            output["note"] = plan.note
        if remaining:
            left = ", ".join(f"{r} ({evictor.blocked.get(r.uid, 'still terminating')})" for r in remaining)
            raise StepFailed(
                f"drain of node {node} timed out after {p.timeout}; pods left: {left}", details=output
            )
        changed = cordoned or bool(evictor.evicted)
        message = f"node {node} drained: {len(evictor.evicted)} evicted, {len(plan.skipped)} skipped"
        return ActionResult(changed=changed, message=message, output=output)

    async def _wait_gone(
        self, kube: KubeAdapter, node: str, refs: list[PodRef], deadline: float
    ) -> list[PodRef]:
        """Poll until none of `refs` (by UID) is on the node; return those still there at the deadline."""
        loop = asyncio.get_running_loop()
        pending = {r.uid: r for r in refs}
        while pending:
            present = {str(Body(p).uid) for p in await kube.list_pods_on_node(node)}
            pending = {uid: r for uid, r in pending.items() if uid in present}
            left = deadline - loop.time()
            if not pending or left <= 0:
                break
            await asyncio.sleep(min(self.poll_interval, left))
        return list(pending.values())

    async def plan(self, ctx: ActionContext, params: DrainParams) -> ActionResult:
        p = params
        node = target_node(ctx)
        if ctx.kube is None:
            return planned(f"would cordon and drain node {node} ({p.pods} pods)", {"node": node, "selection": p.pods})
        pods = await ctx.kube.list_pods_on_node(node)
        plan = plan_drain(pods, p, ctx, set(), await opted_out_namespaces(ctx.kube, pods))
        would = [ref.as_dict() for ref, _ in plan.evict]
        output: JsonObject = {
            "node": node,
            "selection": p.pods,
            "would_evict": list[JsonValue](would),
            "would_wait_for": [r.as_dict() for r in plan.wait],
            "skipped": list[JsonValue](plan.skipped),
        }
        if plan.note:
            output["note"] = plan.note
        return planned(f"would cordon node {node} and evict {len(would)} pods", output)
