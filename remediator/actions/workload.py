"""Scale the workload behind idle GPU pods down, and back: `scale_workload` and `restore_workload`.

The idle pods come from the remediation context: the pods the alert names (dcgm-exporter's pod/namespace
labels) when they hold GPUs, else the pods the node sidecar maps to the alert's GPU (`gpu_pods`). Each pod
is followed to the object that owns its replicas: ReplicaSet -> Deployment, StatefulSet, Job. Deployments
and StatefulSets are scaled through their `scale` subresource; Jobs are suspended (`spec.suspend`), which
stops their pods and keeps their progress. The first observation of every workload (replicas or suspend
flag, and the GPUs its pods hold) is checkpointed before anything is written, so a re-run after a crash
records the state from before the first attempt and the revert restores exactly that. A workload that
someone else rescaled since is left alone by the revert and reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import Field

from remediator.actions.base import Action, ActionContext, ActionResult, NoParams, StrictParams, Target, planned
from remediator.actions.context import owner_chain
from remediator.actions.node import require_kube
from remediator.adapters.kube import KubeAdapter
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import Invalid, NotFound, StepFailed
from remediator.kube.views import Container, Pod, PodSpec, Scale, Workload, as_list, as_mapping, json_object, json_value

__all__ = [
    "GPU_RESOURCE",
    "RestoreWorkload",
    "ScaleParams",
    "ScaleWorkload",
    "count_of",
    "idle_pods",
    "is_gpu_resource",
    "pod_gpu_resources",
    "scalable_owner",
    "single_namespace",
    "whole_gpus",
]

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"


# ---------------------------------------------------------------------------------------- GPU amounts


def is_gpu_resource(name: str) -> bool:
    """nvidia.com/gpu or a MIG profile (nvidia.com/mig-1g.10gb, ...)."""
    return name == GPU_RESOURCE or name.startswith(MIG_PREFIX)


def _amount(value: object) -> int:
    try:
        return max(0, int(float(str(value))))
    except ValueError:
        return 0


def count_of(value: object) -> int:
    """A count as the API sent it (replicas, active pods); absent, null or not a number: 0."""
    return int(value or 0) if isinstance(value, int | float | str) else 0


def _counts(value: object) -> dict[str, int]:
    """A resource -> count map as stored in a step's progress or output (`gpus_per_pod`, `freed`)."""
    return {str(name): count_of(amount) for name, amount in as_mapping(value).items()}


def _container_gpus(container: Container) -> dict[str, int]:
    out: dict[str, int] = {}
    for amounts in container.gpu_amounts():  # requests, then limits
        for name, value in amounts.items():
            out[name] = max(out.get(name, 0), _amount(value))
    return out


def pod_gpu_resources(spec: Mapping[str, object]) -> dict[str, int]:
    """GPU resources one pod of `spec` holds, per resource: containers summed, or the largest init container."""
    total: dict[str, int] = {}
    view = PodSpec(spec)
    for container in view.containers:
        for name, amount in _container_gpus(container).items():
            total[name] = total.get(name, 0) + amount
    for container in view.init_containers:
        for name, amount in _container_gpus(container).items():
            total[name] = max(total.get(name, 0), amount)
    return {name: amount for name, amount in total.items() if amount > 0}


def whole_gpus(resources: Mapping[str, object]) -> int:
    """The whole GPUs in a resource map (MIG slices are reported separately)."""
    return _amount(resources.get(GPU_RESOURCE, 0))


def _times(resources: Mapping[str, int], count: int) -> dict[str, int]:
    return {name: amount * count for name, amount in resources.items() if amount * count > 0}


# ---------------------------------------------------------------------------------------- idle pods


def _identity(pod: Mapping[str, object]) -> set[str]:
    keys = {f"{pod.get('namespace')}/{pod.get('name')}"}
    if pod.get("uid"):
        keys.add(str(pod["uid"]))
    return keys


def idle_pods(context: Mapping[str, object], target: Target) -> list[JsonObject]:
    """The pods holding the idle GPU: those the alert names (if they hold GPUs), else the sidecar's mapping."""
    pods = [json_object(p) for p in as_list(context.get("pods")) if isinstance(p, Mapping)]
    named = [p for p in pods if p.get("from_alert") and not p.get("missing") and count_of(p.get("gpu_request")) > 0]
    if named:
        return named
    mapping = context.get("gpu_pods")
    uuid = target.gpu_uuid or context.get("gpu_uuid") or ""
    listed = mapping.get(str(uuid)) if isinstance(mapping, Mapping) else None
    if not listed:
        return []
    known: dict[str, JsonObject] = {}
    for pod in pods:
        for key in _identity(pod):
            known[key] = pod
    out: list[JsonObject] = []
    for entry in as_list(listed):
        if not isinstance(entry, Mapping) or not entry.get("name") or not entry.get("namespace"):
            continue
        match = next((known[k] for k in _identity(entry) if k in known), None)
        owners = json_value(entry.get("owners") or [])
        out.append(dict(match) if match is not None else {**json_object(entry), "owners": owners})
    return out


def single_namespace(pods: Sequence[Mapping[str, object]]) -> str | None:
    namespaces = {str(p.get("namespace")) for p in pods if p.get("namespace")}
    return namespaces.pop() if len(namespaces) == 1 else None


# ---------------------------------------------------------------------------------------- owners


def _scalable(owners: Sequence[Mapping[str, object]]) -> tuple[str, str] | str:
    """(kind, name) of the object that owns the pod's replicas, or why there is none."""
    if not owners:
        return "a bare pod (no controller)"
    first = owners[0]
    kind, name = str(first.get("kind") or ""), str(first.get("name") or "")
    if first.get("missing"):
        return f"its owner {kind}/{name} is gone"
    if kind == "ReplicaSet":
        parent = owners[1] if len(owners) > 1 else None
        if parent is None or parent.get("kind") != "Deployment":
            return f"ReplicaSet/{name} is not owned by a Deployment"
        if parent.get("missing"):
            return f"its Deployment {parent.get('name')} is gone"
        return "Deployment", str(parent.get("name"))
    if kind in ("StatefulSet", "Job"):
        return kind, name
    return f"owner kind {kind} cannot be scaled"


async def _owners_of(kube: KubeAdapter, pod: Mapping[str, object]) -> list[Mapping[str, object]]:
    owners = as_list(pod.get("owners"))
    if owners:
        return [as_mapping(o) for o in owners]
    namespace, name = str(pod.get("namespace")), str(pod.get("name"))
    try:
        obj = await kube.get_pod(namespace, name)
    except NotFound:
        return []
    return list(await owner_chain(kube, namespace, obj, {}))


def _key(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


# ---------------------------------------------------------------------------------------- scale_workload


class ScaleParams(StrictParams):
    replicas: int = Field(default=0, ge=0)


async def _per_pod_gpus(
    kube: KubeAdapter, workload: Mapping[str, object], pod: Mapping[str, object]
) -> dict[str, int]:
    """GPUs one replica holds: from the pod template, else from the idle pod itself."""
    from_template = pod_gpu_resources(Workload(workload).template_spec.raw)
    if from_template:
        return from_template
    try:
        live = await kube.get_pod(str(pod.get("namespace")), str(pod.get("name")))
    except NotFound:
        return {}
    return pod_gpu_resources(Pod(live).spec)


async def _observe(
    kube: KubeAdapter, kind: str, namespace: str, name: str, pod: Mapping[str, object]
) -> JsonObject:
    """The workload as found before the first change: its replicas (or suspend flag) and GPUs per pod."""
    workload = await kube.get_object(kind, namespace, name)
    per_pod = await _per_pod_gpus(kube, workload, pod)
    entry: JsonObject = {"kind": kind, "namespace": namespace, "name": name, "gpus_per_pod": dict(per_pod)}
    if kind == "Job":
        job = Workload(workload)
        entry["previous"] = json_value(job.suspend)
        entry["running_pods"] = 0 if job.suspend else count_of(job.active or job.parallelism or 1)
    else:
        entry["previous"] = count_of(Scale(await kube.get_scale(kind, namespace, name)).replicas)
    return entry


def _freed(entry: Mapping[str, object], replicas: int) -> dict[str, int]:
    per_pod = _counts(entry.get("gpus_per_pod"))
    if entry["kind"] == "Job":
        return _times(per_pod, count_of(entry.get("running_pods")))
    return _times(per_pod, max(0, count_of(entry["previous"]) - replicas))


async def _apply(kube: KubeAdapter, entry: Mapping[str, object], replicas: int) -> bool:
    """Put the workload into its scaled-down state; False when it already is."""
    kind, namespace, name = str(entry["kind"]), str(entry["namespace"]), str(entry["name"])
    if kind == "Job":
        job = Workload(await kube.get_job(namespace, name))
        if job.suspend is True:
            return False
        rv = job.resource_version
        await kube.patch_job(namespace, name, {"metadata": {"resourceVersion": rv}, "spec": {"suspend": True}})
        return True
    scale = Scale(await kube.get_scale(kind, namespace, name))
    current = count_of(scale.replicas)
    if current <= replicas:
        return False
    await kube.patch_scale(kind, namespace, name, replicas, resource_version=scale.resource_version)
    return True


def _differs(entry: Mapping[str, object]) -> bool:
    if entry["kind"] == "Job":
        return entry.get("previous") is not True
    return count_of(entry["previous"]) > count_of(entry["set"])


def _sum(maps: list[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for resources in maps:
        for name, amount in resources.items():
            total[name] = total.get(name, 0) + int(amount)
    return total


class ScaleWorkload(Action[ScaleParams]):
    """Scale the owners of the idle GPU pods to `replicas` (Jobs: suspend), recording what they were."""

    name = "scale_workload"
    Params = ScaleParams
    default_revert = "restore_workload"

    async def plan(self, ctx: ActionContext, params: ScaleParams) -> ActionResult:
        """With a cluster: the same reading as `apply` (owners, replicas now), without the writes."""
        if ctx.kube is not None:
            return await self._scale(ctx, params, write=False)
        pods = _idle_pods(ctx)
        names = ", ".join(f"{q.get('namespace')}/{q.get('name')}" for q in pods)
        return planned(f"would scale the owners of {names} to {params.replicas}",
                       {"pods": [f"{q.get('namespace')}/{q.get('name')}" for q in pods]})

    async def apply(self, ctx: ActionContext, params: ScaleParams) -> ActionResult:
        return await self._scale(ctx, params, write=True)

    async def _scale(self, ctx: ActionContext, p: ScaleParams, *, write: bool) -> ActionResult:
        pods = _idle_pods(ctx)
        kube = require_kube(ctx)
        prior = {key: json_object(as_mapping(entry)) for key, entry in as_mapping(ctx.progress.get("prior")).items()}
        skipped: list[JsonObject] = []
        order: list[str] = []
        for pod in pods:
            namespace = str(pod.get("namespace"))
            found = _scalable(await _owners_of(kube, pod))
            if isinstance(found, str):
                skipped.append({"pod": f"{namespace}/{pod.get('name')}", "reason": found})
                continue
            kind, name = found
            key = _key(kind, namespace, name)
            if key not in order:
                order.append(key)
            if key not in prior:
                try:
                    prior[key] = await _observe(kube, kind, namespace, name, pod)
                except NotFound:
                    skipped.append({"pod": f"{namespace}/{pod.get('name')}", "reason": f"{kind}/{name} is gone"})
                    order.remove(key)
                    continue
                prior[key]["set"] = True if kind == "Job" else p.replicas
                prior[key]["freed"] = dict(_freed(prior[key], p.replicas))
                ctx.progress["prior"] = dict(prior)
                await ctx.checkpoint(dict(ctx.progress))
        if not order:
            reasons = "; ".join(f"{s['pod']}: {s['reason']}" for s in skipped)
            raise StepFailed(f"no idle pod has a workload that can be scaled ({reasons})")
        workloads: list[JsonObject] = []
        for key in order:
            entry = dict(prior[key])
            entry["changed"] = await _apply(kube, entry, p.replicas) if write else False
            # the step's effect, whichever attempt wrote it: what the revert undoes and the report counts
            entry["scaled"] = write and _differs(entry)
            workloads.append(entry)
        freed = _sum([_counts(w["freed"]) for w in workloads])
        namespaces = {str(w["namespace"]) for w in workloads}
        output: JsonObject = {
            "namespace": namespaces.pop() if len(namespaces) == 1 else None,
            "replicas": p.replicas,
            "workloads": list[JsonValue](workloads),
            "freed": dict(freed),
            "gpus_freed": whole_gpus(freed),
            "skipped": list[JsonValue](skipped),
        }
        changed = any(w["changed"] for w in workloads)
        described = ", ".join(_describe(w) for w in workloads)
        prefix = "scaled" if write else "dry run: would scale"
        if not write:
            output["dry_run"] = True
        return ActionResult(changed=changed, message=f"{prefix} {described}", output=output)

    def describe(self, target: Target, params: ScaleParams) -> str:
        return f"scale the workloads of the idle pods on {target.key} to {params.replicas} (Jobs: suspend)"


def _idle_pods(ctx: ActionContext) -> list[JsonObject]:
    pods = idle_pods(ctx.gathered, ctx.target)
    if not pods:
        raise StepFailed(
            f"no pod holding GPU {ctx.target.gpu_uuid or ctx.target.gpu_index or '?'} is known "
            "(no pod labels on the alert and no sidecar mapping): nothing to scale"
        )
    return pods


def _describe(entry: Mapping[str, object]) -> str:
    what = f"{entry['kind']}/{entry['namespace']}/{entry['name']}"
    if entry["kind"] == "Job":
        return f"{what} suspended"
    return f"{what} {entry['previous']} -> {entry['set']}"


# ---------------------------------------------------------------------------------------- restore_workload


async def _restore(kube: KubeAdapter, entry: Mapping[str, object]) -> str:
    """Undo one workload's change; returns what happened (restored, unchanged, left, gone)."""
    kind, namespace, name = str(entry["kind"]), str(entry["namespace"]), str(entry["name"])
    try:
        if kind == "Job":
            job = Workload(await kube.get_job(namespace, name))
            if job.suspend is not True:
                return "left: resumed by someone else"
            if entry.get("previous") is True:
                return "unchanged: it was suspended before"
            previous_flag = entry.get("previous")
            patch: JsonObject = {
                "metadata": {"resourceVersion": job.resource_version},
                "spec": {"suspend": previous_flag if isinstance(previous_flag, bool) else None},
            }
            await kube.patch_job(namespace, name, patch)
            return "restored"
        scale = Scale(await kube.get_scale(kind, namespace, name))
    except NotFound:
        return "gone"
    current = count_of(scale.replicas)
    previous = count_of(entry["previous"])
    if current == previous:
        return "unchanged"
    if current != count_of(entry["set"]):
        return f"left: rescaled to {current} by someone else"
    await kube.patch_scale(kind, namespace, name, previous, resource_version=scale.resource_version)
    return "restored"


class RestoreWorkload(Action[NoParams]):
    """Put back the replicas (or the Job's suspend flag) that `scale_workload` recorded."""

    name = "restore_workload"
    Params = NoParams

    def _scaled(self, ctx: ActionContext) -> list[Mapping[str, object]]:
        """The workloads scale_workload changed."""
        prior = ctx.prior_output
        if prior is None:
            raise Invalid(f"{self.name}: no scale_workload output to undo")
        return [w for w in as_list(prior.get("workloads")) if isinstance(w, Mapping) and w.get("scaled")]

    async def plan(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        return planned(f"would restore {len(self._scaled(ctx))} workload(s)", {"workloads": []})

    async def apply(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        entries = self._scaled(ctx)
        kube = require_kube(ctx)
        results: list[JsonObject] = []
        for entry in entries:
            outcome = await _restore(kube, entry)
            results.append(
                {
                    **json_object({key: entry.get(key) for key in ("kind", "namespace", "name", "previous")}),
                    "outcome": outcome,
                    "freed": json_object(as_mapping(entry.get("freed"))),
                }
            )
        restored = [r for r in results if r["outcome"] == "restored"]
        message = ", ".join(f"{r['kind']}/{r['namespace']}/{r['name']}: {r['outcome']}" for r in results)
        return ActionResult(
            changed=bool(restored),
            message=message or "nothing was scaled: nothing to restore",
            output={"workloads": list[JsonValue](results),
                    "returned": dict(_sum([_counts(r["freed"]) for r in results]))},
        )


def scalable_owner(owners: Sequence[Mapping[str, object]]) -> tuple[str, str] | None:
    """(kind, name) of the workload `scale_workload` would act on, for display; None when there is none."""
    found = _scalable(owners)
    return None if isinstance(found, str) else found

