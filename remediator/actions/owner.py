"""Telling the owners of idle GPU pods: `annotate_pods` (and its revert `unannotate_pods`) and `notify_owner`.

`annotate_pods` writes one annotation on every idle pod (so `kubectl describe pod` shows why the controller
is interested), remembering each pod's previous value; the revert writes that value back, or removes the
key, unless someone rewrote it since. `notify_owner` finds who owns the namespace of the idle pods: the
namespace annotation `remediator.io/owner` (a Slack channel `#team-ml` or user `@alice`, used as written),
else the namespace label `team` (sent to `#<team>`) or `owner` (sent to `@<owner>`), else the step's
`default_channel`, else the channels the notifier is configured with. The message lists the pods, their
owners and the GPU-hours the GPU has been idle so far; delivery is queued and never fails the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from pydantic import Field, field_validator

from remediator.actions.base import Action, ActionContext, ActionResult, StrictParams, Target, planned
from remediator.actions.node import MAX_ANNOTATION_BYTES, require_kube
from remediator.actions.workload import count_of, idle_pods, single_namespace
from remediator.adapters.kube import KubeAdapter
from remediator.adapters.notifier import Message, PodLine
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import Invalid, NotFound
from remediator.kube.views import Body, as_list, as_mapping, as_str, json_object, json_value
from remediator.kube.vocabulary import IDLE_ANNOTATION, OWNER_ANNOTATION, AnnotationKey

__all__ = [
    "IDLE_ANNOTATION",
    "OWNER_ANNOTATION",
    "AnnotatePods",
    "NotifyOwner",
    "UnannotatePods",
    "find_owner",
    "idle_gpu_hours",
]

OWNER_LABELS = (("team", "#"), ("owner", "@"))


# ---------------------------------------------------------------------------------------- annotate_pods


class AnnotatePodsParams(StrictParams):
    key: AnnotationKey = IDLE_ANNOTATION
    value: str = Field(max_length=4096)


class UnannotatePodsParams(StrictParams):
    key: str | None = None


def _pod_names(ctx: ActionContext) -> list[tuple[str, str]]:
    return [(str(p["namespace"]), str(p["name"])) for p in idle_pods(ctx.gathered, ctx.target)]


class AnnotatePods(Action[AnnotatePodsParams]):
    """Set one annotation on each idle pod, recording the value each had before."""

    name = "annotate_pods"
    Params = AnnotatePodsParams
    default_revert = "unannotate_pods"

    @staticmethod
    def _pods(ctx: ActionContext, p: AnnotatePodsParams) -> list[tuple[str, str]]:
        if len(p.value.encode()) > MAX_ANNOTATION_BYTES:
            raise Invalid(f"annotation {p.key} value longer than {MAX_ANNOTATION_BYTES} bytes")
        return _pod_names(ctx)

    async def plan(self, ctx: ActionContext, params: AnnotatePodsParams) -> ActionResult:
        shown = ", ".join(f"{ns}/{n}" for ns, n in self._pods(ctx, params)) or "no pods"
        return planned(f"would annotate {shown} with {params.key}", {"key": params.key, "pods": []})

    async def apply(self, ctx: ActionContext, params: AnnotatePodsParams) -> ActionResult:
        p = params
        pods = self._pods(ctx, p)
        kube = require_kube(ctx)
        prior = json_object(as_mapping(ctx.progress.get("prior")))
        done: list[JsonObject] = []
        for namespace, name in pods:
            ident = f"{namespace}/{name}"
            try:
                pod = await kube.get_pod(namespace, name)
            except NotFound:
                continue
            current = Body(pod).annotations.get(p.key)
            if ident not in prior:
                prior[ident] = {"previous": current}
                ctx.progress["prior"] = prior
                await ctx.checkpoint(dict(ctx.progress))
            changed = current != p.value
            if changed:
                await kube.patch_object("Pod", namespace, name, {"metadata": {"annotations": {p.key: p.value}}})
            done.append(
                {"namespace": namespace, "name": name, "previous": json_value(as_mapping(prior[ident]).get("previous")),
                 "changed": changed}
            )
        message = f"annotated {len(done)} pod(s) with {p.key}" if done else "no idle pod to annotate"
        return ActionResult(
            changed=any(d["changed"] for d in done),
            message=message,
            output={"key": p.key, "value": p.value, "pods": list[JsonValue](done)},
        )


async def _unannotate(kube: KubeAdapter, entry: Mapping[str, object], key: str, ours: str | None) -> str:
    namespace, name = str(entry["namespace"]), str(entry["name"])
    try:
        pod = await kube.get_pod(namespace, name)
    except NotFound:
        return "gone"
    current = Body(pod).annotations.get(key)
    previous = as_str(entry.get("previous"))
    if current == previous:
        return "unchanged"
    if ours is not None and current != ours:
        return "left: rewritten by someone else"
    await kube.patch_object("Pod", namespace, name, {"metadata": {"annotations": {key: previous}}})
    return "restored" if previous is not None else "removed"


class UnannotatePods(Action[UnannotatePodsParams]):
    """Undo `annotate_pods`: the previous value back, or the key removed."""

    name = "unannotate_pods"
    Params = UnannotatePodsParams

    def _undo(self, ctx: ActionContext, p: UnannotatePodsParams) -> tuple[str, list[Mapping[str, object]]]:
        """(annotation key, pods to restore with the value each had before)."""
        prior = ctx.prior_output or {}
        key = p.key or prior.get("key")
        if not key:
            raise Invalid(f"{self.name}: no key given and no annotate_pods output to undo")
        entries = [as_mapping(entry) for entry in as_list(prior.get("pods"))]
        if not entries and ctx.prior_output is None:
            entries = [{"namespace": ns, "name": n, "previous": None} for ns, n in _pod_names(ctx)]
        return str(key), entries

    async def plan(self, ctx: ActionContext, params: UnannotatePodsParams) -> ActionResult:
        key, entries = self._undo(ctx, params)
        return planned(f"would remove {key} from {len(entries)} pod(s)", {"key": key})

    async def apply(self, ctx: ActionContext, params: UnannotatePodsParams) -> ActionResult:
        key, entries = self._undo(ctx, params)
        kube = require_kube(ctx)
        ours = as_str((ctx.prior_output or {}).get("value"))
        results: list[JsonObject] = [
            {**json_object({"namespace": e["namespace"], "name": e["name"]}),
             "outcome": await _unannotate(kube, e, key, ours)}
            for e in entries
        ]
        changed = any(r["outcome"] in ("restored", "removed") for r in results)
        return ActionResult(
            changed=changed,
            message=f"annotation {key}: " + (", ".join(f"{r['name']} {r['outcome']}" for r in results) or "no pods"),
            output={"key": key, "pods": list[JsonValue](results)},
        )


# ---------------------------------------------------------------------------------------- notify_owner


class NotifyOwnerParams(StrictParams):
    default_channel: str | None = Field(default=None, max_length=80)
    message: str = Field(default="", max_length=2000)

    @field_validator("default_channel")
    @classmethod
    def _blank(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None


async def find_owner(
    kube: KubeAdapter | None, namespace: str | None, default: str | None
) -> tuple[str | None, str]:
    """(channel, where it came from) for the namespace: annotation, team/owner label, default, or none."""
    if kube is not None and namespace:
        try:
            meta = Body(await kube.get_namespace(namespace)).metadata
        except NotFound:
            meta = Body({}).metadata
        owner = (meta.annotations.get(OWNER_ANNOTATION) or "").strip()
        if owner:
            return owner, f"annotation {OWNER_ANNOTATION}"
        labels = meta.labels
        for label, sigil in OWNER_LABELS:
            value = str(labels.get(label) or "").strip()
            if value:
                return f"{sigil}{value}", f"label {label}"
    if default:
        return default, "default channel"
    return None, "notifier channels"


def _parse_time(value: object) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def idle_gpu_hours(starts_at: object, gpus: int, now: datetime) -> float:
    """GPU-hours idle since the alert started (the alert's `for:` window comes on top)."""
    started = _parse_time(starts_at)
    if started is None or gpus <= 0:
        return 0.0
    return round(max(0.0, (now - started).total_seconds()) / 3600 * gpus, 2)


def _owner_text(pod: Mapping[str, object]) -> str:
    return " → ".join(f"{o.get('kind')}/{o.get('name')}" for o in as_list(pod.get("owners")) if isinstance(o, Mapping))


class NotifyOwner(Action[NotifyOwnerParams]):
    """Tell the namespace's owner which pods hold an idle GPU, who owns them and what it has cost so far."""

    name = "notify_owner"
    Params = NotifyOwnerParams
    mutating = False

    async def plan(self, ctx: ActionContext, params: NotifyOwnerParams) -> ActionResult:
        """A dry run notifies too: a message changes nothing in the cluster."""
        return await self.apply(ctx, params)

    async def apply(self, ctx: ActionContext, params: NotifyOwnerParams) -> ActionResult:
        p = params
        pods = idle_pods(ctx.gathered, ctx.target)
        namespace = single_namespace(pods) or ctx.target.namespace
        channel, source = await find_owner(ctx.kube, namespace, p.default_channel)
        gpu = ctx.target.gpu_uuid or ctx.target.gpu_index or "?"
        hours = idle_gpu_hours(ctx.alert_starts_at or None, 1, datetime.now(UTC))
        lines = tuple(
            PodLine(namespace=str(q.get("namespace") or ""), name=str(q.get("name") or ""), owner=_owner_text(q))
            for q in pods
        )
        held = sum(count_of(q.get("gpu_request")) for q in pods)
        text = (
            f"GPU {gpu} on node {ctx.target.node or '?'} has been idle for about {hours:g} GPU-hours "
            f"(since the alert started)."
        )
        if pods:
            text += f" {len(pods)} pod(s) in {namespace or 'several namespaces'} hold {held} GPU(s)."
        else:
            text += " No pod holding it is known."
        if p.message:
            text += "\n" + p.message
        output: JsonObject = {
            "owner": channel,
            "owner_source": source,
            "namespace": namespace,
            "pods": [{"namespace": q.namespace, "name": q.name, "owner": q.owner} for q in lines],
            "gpu_hours_idle": hours,
            "gpus_held": held,
        }
        if ctx.notifier is None:
            return ActionResult(changed=False, message="no notifier configured", output={**output, "sent": False})
        await ctx.notifier.send(
            Message(
                event="idle_gpu",
                title=f"Idle GPU in {namespace or '?'}: {gpu} on {ctx.target.node or '?'}"[:150],
                text=text,
                tone="warning",
                fields=tuple(
                    (k, v)
                    for k, v in (
                        ("Namespace", namespace or "-"),
                        ("Node", ctx.target.node or "-"),
                        ("GPU", str(gpu)),
                        ("Idle so far", f"{hours:g} GPU-hours"),
                        ("Owner", f"{channel or 'configured channels'} ({source})"),
                    )
                ),
                pods=lines,
                remediation_id=ctx.remediation_id,
                channel=channel,
                data={"remediation_id": ctx.remediation_id, "step": ctx.step_name, **output},
            )
        )
        where = channel or "the configured channels"
        return ActionResult(
            changed=False, message=f"owner notified at {where} ({source})", output={**output, "sent": True}
        )

    def describe(self, target: Target, params: NotifyOwnerParams) -> str:
        return f"notify the owner of the idle pods on {target.key} (namespace annotation {OWNER_ANNOTATION})"
