"""Node actions: cordon, taint, label and annotate a node, and their exact reverts.

Each forward action records what it found before writing (in the step's checkpointed progress, so a
re-run after a crash still knows the state from before the first attempt) and returns it in its output;
the revert reads that output and restores exactly that state. Taints, labels and annotations that others
set are never removed or rewritten. Values that alert text may feed into (taint values, label values) are
checked against Kubernetes syntax before any request, so a bad value fails the step instead of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import field_validator

from remediator.actions.base import Action, ActionContext, ActionResult, NoParams, StrictParams, planned
from remediator.adapters.kube import KubeAdapter, KubeObject
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import Conflict, Invalid, NotSupported, StepFailed
from remediator.kube.views import Body, Node, as_mapping, json_object
from remediator.kube.vocabulary import (
    QUARANTINE_TAINT,
    REMEDIATION_ANNOTATION,
    STATE_LABEL,
    AnnotationKey,
    LabelKey,
    LabelValue,
    TaintKey,
    TaintValue,
    label_value_problem,
    qualified_name_problem,
)
from remediator.retrying import CONFLICT_ATTEMPTS, on_conflict

__all__ = [
    "DEFAULT_TAINT_KEY",
    "QUARANTINE_STATE",
    "REMEDIATION_ANNOTATION",
    "STATE_LABEL",
    "Annotate",
    "Cordon",
    "Label",
    "Taint",
    "Unannotate",
    "Uncordon",
    "Unlabel",
    "Untaint",
    "cordon_node",
    "cordoned_by",
    "label_value_problem",
    "qualified_name_problem",
    "require_kube",
    "target_node",
    "unmark_patch",
]

DEFAULT_TAINT_KEY = QUARANTINE_TAINT
QUARANTINE_STATE = "quarantined"
MAX_ANNOTATION_BYTES = 256 * 1024

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

# ---------------------------------------------------------------------------------------- syntax


def _checked(what: str, value: str, problem: str | None) -> str:
    """Check again before a request: parameters built without `parse` (model_construct) skipped the types."""
    if problem is not None:
        raise Invalid(f"invalid {what} {value!r}: {problem}", details={"field": what, "value": value})
    return value


# ---------------------------------------------------------------------------------------- shared


def require_kube(ctx: ActionContext) -> KubeAdapter:
    if ctx.kube is None:
        raise NotSupported("no Kubernetes credentials: the controller runs plan-only")
    return ctx.kube


def target_node(ctx: ActionContext) -> str:
    if not ctx.target.node:
        raise Invalid(f"{ctx.step_name}: the remediation target {ctx.target.key} names no node")
    return ctx.target.node


def cordoned_by(node: Mapping[str, object], remediation_id: str) -> bool:
    """The node is unschedulable, and the cordon is this remediation's (its annotation names it)."""
    view = Node(node)
    return view.unschedulable and view.annotations.get(REMEDIATION_ANNOTATION) == remediation_id


def _meta_map(node: Mapping[str, object], field: Literal["labels", "annotations"]) -> dict[str, str]:
    meta = Body(node).metadata
    return meta.labels if field == "labels" else meta.annotations


def _taints(node: Mapping[str, object]) -> list[JsonObject]:
    """The node's taints, each whole (a taint patch replaces the list: fields this controller does not
    read, such as timeAdded, are written back as they were)."""
    return [json_object(t.raw) for t in Node(node).taints]


async def _remember(ctx: ActionContext, observed: JsonObject) -> JsonObject:
    """The state before the first attempt: from progress when an earlier attempt saved it, else `observed`."""
    prior = ctx.progress.get("prior")
    if isinstance(prior, dict):
        return prior
    ctx.progress["prior"] = observed
    await ctx.checkpoint(dict(ctx.progress))
    return observed


async def _node_for_observe(ctx: ActionContext) -> KubeObject:
    """The target node for `observe`: as the context read it a moment ago (`ctx.node_read`), else read now."""
    if ctx.node_read is not None:
        return ctx.node_read
    return await require_kube(ctx).get_node(target_node(ctx))


def _needs_marks(node: Mapping[str, object]) -> bool:
    return REMEDIATION_ANNOTATION not in _meta_map(node, "annotations")


def _mark_patch(node: Mapping[str, object], ctx: ActionContext) -> JsonObject:
    labels: JsonObject = {}
    if STATE_LABEL not in _meta_map(node, "labels"):
        labels[STATE_LABEL] = QUARANTINE_STATE
    return {"labels": labels, "annotations": {REMEDIATION_ANNOTATION: ctx.remediation_id}}


def _unmark_patch(node: Mapping[str, object], remediation_id: str) -> JsonObject:
    """Remove our marks, but only while they are still ours."""
    if _meta_map(node, "annotations").get(REMEDIATION_ANNOTATION) != remediation_id:
        return {}
    patch: JsonObject = {"annotations": {REMEDIATION_ANNOTATION: None}}
    if _meta_map(node, "labels").get(STATE_LABEL) == QUARANTINE_STATE:
        patch["labels"] = {STATE_LABEL: None}
    return patch


def unmark_patch(node: Mapping[str, object], remediation_id: str) -> JsonObject:
    """The metadata patch that removes this remediation's marks from `node` (empty when they are not its)."""
    return _unmark_patch(node, remediation_id)


def _should_unmark(ctx: ActionContext) -> bool:
    if ctx.prior_output is None:
        return True
    return bool(ctx.prior_output.get("marked"))


# ---------------------------------------------------------------------------------------- cordon


def _cordon_prior(node: Mapping[str, object]) -> JsonObject:
    return {"was_unschedulable": Node(node).unschedulable, "marked": _needs_marks(node)}


async def cordon_node(ctx: ActionContext, kube: KubeAdapter, name: str) -> tuple[JsonObject, bool]:
    """Cordon and mark `name`; returns (output with was_unschedulable and marked, changed)."""
    node = await kube.get_node(name)
    unschedulable = Node(node).unschedulable
    prior = await _remember(ctx, _cordon_prior(node))
    output: JsonObject = {
        "node": name,
        "was_unschedulable": bool(prior["was_unschedulable"]),
        "marked": bool(prior["marked"]),
    }
    patch: JsonObject = {}
    if not unschedulable:
        patch["spec"] = {"unschedulable": True}
    if _needs_marks(node):
        patch["metadata"] = _mark_patch(node, ctx)
    if patch:
        await kube.patch_node(name, patch)
    return output, bool(patch)


class Cordon(Action[NoParams]):
    """Mark the node unschedulable (and with the controller's marks)."""

    name = "cordon"
    Params = NoParams
    quarantines = True
    default_revert = "uncordon"

    def still_holds(self, node: Mapping[str, object], params: Mapping[str, object], remediation_id: str) -> bool:
        """Still cordoned, by this remediation (another's cordon is theirs)."""
        return cordoned_by(node, remediation_id)

    async def plan(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        name = target_node(ctx)
        if ctx.kube is None:
            return planned(f"would cordon node {name}", {"node": name})
        unschedulable = Node(await ctx.kube.get_node(name)).unschedulable
        what = "node is already cordoned" if unschedulable else f"would cordon node {name}"
        return planned(what, {"node": name, "was_unschedulable": unschedulable})

    async def observe(self, ctx: ActionContext, params: NoParams) -> JsonObject | None:
        """Whether the node was unschedulable and unmarked before: stored with the step row when it begins."""
        return {"prior": _cordon_prior(await _node_for_observe(ctx))}

    async def apply(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        name = target_node(ctx)
        output, changed = await cordon_node(ctx, require_kube(ctx), name)
        verb = "cordoned" if changed else "already cordoned"
        return ActionResult(changed=changed, message=f"node {name} {verb}", output=output)


class Uncordon(Action[NoParams]):
    """Make the node schedulable again, unless it was already unschedulable before the remediation."""

    name = "uncordon"
    Params = NoParams

    async def plan(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        name = target_node(ctx)
        keep = " (stays cordoned: it was cordoned before)" if _was_unschedulable(ctx) else ""
        return planned(f"would uncordon node {name}{keep}", {"node": name})

    async def apply(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        name = target_node(ctx)
        was_unschedulable = _was_unschedulable(ctx)
        kube = require_kube(ctx)
        node = await kube.get_node(name)
        patch: JsonObject = {}
        if not was_unschedulable and Node(node).unschedulable:
            patch["spec"] = {"unschedulable": None}
        marks = _unmark_patch(node, ctx.remediation_id) if _should_unmark(ctx) else {}
        if marks:
            patch["metadata"] = marks
        if patch:
            await kube.patch_node(name, patch)
        message = (
            f"node {name} left cordoned: it was cordoned before"
            if was_unschedulable
            else f"node {name} uncordoned"
        )
        return ActionResult(
            changed=bool(patch), message=message, output={"node": name, "kept_cordoned": was_unschedulable}
        )


def _rv(node: Mapping[str, object]) -> str | None:
    """The node's resourceVersion: a patch that carries it fails (409) when the node changed since."""
    return Body(node).resource_version


def _was_unschedulable(ctx: ActionContext) -> bool:
    return bool((ctx.prior_output or {}).get("was_unschedulable"))


# ---------------------------------------------------------------------------------------- taints


class TaintParams(StrictParams):
    key: TaintKey = DEFAULT_TAINT_KEY
    value: TaintValue = ""
    effect: TaintEffect = "NoSchedule"


class UntaintParams(StrictParams):
    key: str | None = None
    value: str | None = None
    effect: TaintEffect | None = None


def _find_taint(taints: list[JsonObject], key: str, effect: str) -> JsonObject | None:
    return next((t for t in taints if t.get("key") == key and t.get("effect") == effect), None)


def _with_taint(taints: list[JsonObject], key: str, value: str, effect: str) -> list[JsonObject]:
    wanted: JsonObject = {"key": key, "value": value, "effect": effect}
    replaced = [wanted if (t.get("key"), t.get("effect")) == (key, effect) else t for t in taints]
    return replaced if wanted in replaced else [*taints, wanted]


def _taint_value(taint: Mapping[str, object] | None) -> str | None:
    return None if taint is None else str(taint.get("value") or "")


async def _patch_with_retry(
    kube: KubeAdapter, name: str, build: Callable[[KubeObject], JsonObject], read: KubeObject | None = None
) -> tuple[KubeObject, JsonObject]:
    """Build a patch from the node (`build(node) -> patch`) and write it guarded by resourceVersion.

    The first attempt builds on `read` when the caller has just read the node, else reads it. A 409 means
    another writer got in between: read again and rebuild, so their change survives.
    """
    try:
        async for attempt in on_conflict(Conflict):
            with attempt:
                node, read = read or await kube.get_node(name), None
                patch = build(node)
                if not patch:
                    return node, patch
                meta = patch.get("metadata")
                patch["metadata"] = {**(meta if isinstance(meta, dict) else {}), "resourceVersion": _rv(node)}
                return await kube.patch_node(name, patch), patch
    except Conflict:
        raise StepFailed(f"node {name} kept changing under us ({CONFLICT_ATTEMPTS} attempts)") from None
    raise AssertionError("unreachable")  # pragma: no cover


class Taint(Action[TaintParams]):
    """Put one taint (key + effect) on the node, replacing only a taint with the same key and effect."""

    name = "taint"
    Params = TaintParams
    quarantines = True
    default_revert = "untaint"

    def still_holds(self, node: Mapping[str, object], params: Mapping[str, object], remediation_id: str) -> bool:
        """A taint with the step's key and effect is still on the node."""
        key, effect = params.get("key") or DEFAULT_TAINT_KEY, params.get("effect") or "NoSchedule"
        return _find_taint(_taints(node), str(key), str(effect)) is not None

    @staticmethod
    def _checked(p: TaintParams) -> str:
        """The taint as `key=value:effect`, after checking it once more (parameters built without `parse`)."""
        _checked("taint key", p.key, qualified_name_problem(p.key))
        _checked("taint value", p.value, label_value_problem(p.value))
        return f"{p.key}={p.value}:{p.effect}"

    async def plan(self, ctx: ActionContext, params: TaintParams) -> ActionResult:
        described = self._checked(params)
        name = target_node(ctx)
        return planned(
            f"would taint node {name} with {described}", {"node": name, "key": params.key, "effect": params.effect}
        )

    @staticmethod
    def _prior(node: Mapping[str, object], p: TaintParams) -> JsonObject:
        """The taint with this key and effect before the step (its value, or None) and whether marks were
        missing: what the undo restores."""
        current = _find_taint(_taints(node), p.key, p.effect)
        return {"previous": None if current is None else {"value": _taint_value(current)}, "marked": _needs_marks(node)}

    async def observe(self, ctx: ActionContext, params: TaintParams) -> JsonObject | None:
        """The taint and marks before the step: stored with the step row when it begins; the node read is
        kept for `apply` (its patch carries the node's resourceVersion, so a change since is not lost)."""
        ctx.observed = node = await _node_for_observe(ctx)
        return {"prior": self._prior(node, params)}

    async def apply(self, ctx: ActionContext, params: TaintParams) -> ActionResult:
        p = params
        described = self._checked(p)
        name = target_node(ctx)
        kube = require_kube(ctx)
        node, ctx.observed = ctx.observed or await kube.get_node(name), None  # a retry reads afresh
        prior = await _remember(ctx, self._prior(node, p))

        def build(fresh: KubeObject) -> JsonObject:
            patch: JsonObject = {}
            if _taint_value(_find_taint(_taints(fresh), p.key, p.effect)) != p.value:
                patch["spec"] = {"taints": list[JsonValue](_with_taint(_taints(fresh), p.key, p.value, p.effect))}
            if _needs_marks(fresh):
                patch["metadata"] = _mark_patch(fresh, ctx)
            return patch

        _, patch = await _patch_with_retry(kube, name, build, node)  # the resourceVersion guards the gap
        output: JsonObject = {
            "node": name,
            "key": p.key,
            "value": p.value,
            "effect": p.effect,
            "previous": prior["previous"],
            "marked": bool(prior["marked"]),
        }
        verb = "tainted" if patch else "already tainted"
        return ActionResult(changed=bool(patch), message=f"node {name} {verb} {described}", output=output)


class Untaint(Action[UntaintParams]):
    """Remove the taint (key + effect), or put back the value it had before the remediation."""

    name = "untaint"
    Params = UntaintParams

    @staticmethod
    def _taint(ctx: ActionContext, p: UntaintParams) -> tuple[str, str]:
        """(key, effect): as given, else those of the forward step, else the controller's taint."""
        prior = ctx.prior_output or {}
        return p.key or str(prior.get("key") or DEFAULT_TAINT_KEY), p.effect or str(prior.get("effect") or "NoSchedule")

    async def plan(self, ctx: ActionContext, params: UntaintParams) -> ActionResult:
        key, effect = self._taint(ctx, params)
        name = target_node(ctx)
        return planned(f"would remove taint {key}:{effect} from node {name}", {"node": name, "key": key})

    async def apply(self, ctx: ActionContext, params: UntaintParams) -> ActionResult:
        prior = ctx.prior_output or {}
        key, effect = self._taint(ctx, params)
        name = target_node(ctx)
        kube = require_kube(ctx)

        def build(fresh: KubeObject) -> JsonObject:
            patch: JsonObject = {}
            taints = _restored_taints(_taints(fresh), key, effect, ctx.prior_output)
            if taints != _taints(fresh):
                patch["spec"] = {"taints": list[JsonValue](taints)}
            marks = _unmark_patch(fresh, ctx.remediation_id) if _should_unmark(ctx) else {}
            if marks:
                patch["metadata"] = marks
            return patch

        _, patch = await _patch_with_retry(kube, name, build)
        restored = as_mapping(prior.get("previous")).get("value") if ctx.prior_output else None
        what = (
            f"restored taint {key}={restored}:{effect}"
            if restored is not None
            else f"removed taint {key}:{effect}"
        )
        message = (
            f"node {name}: {what}" if patch else f"node {name}: nothing to undo for taint {key}:{effect}"
        )
        return ActionResult(
            changed=bool(patch), message=message, output={"node": name, "key": key, "effect": effect}
        )


def _restored_taints(
    taints: list[JsonObject], key: str, effect: str, prior: Mapping[str, JsonValue] | None
) -> list[JsonObject]:
    current = _find_taint(taints, key, effect)
    if current is None:
        return taints
    if prior is None:
        return [t for t in taints if t is not current]
    if _taint_value(current) != str(prior.get("value") or ""):
        return taints  # someone rewrote the taint since: it is theirs now
    previous = prior.get("previous")
    if previous is not None:
        return _with_taint(taints, key, str(as_mapping(previous).get("value") or ""), effect)
    return [t for t in taints if t is not current]


# ---------------------------------------------------------------------------------------- labels, annotations


class LabelParams(StrictParams):
    key: LabelKey
    value: LabelValue


class AnnotationParams(StrictParams):
    key: AnnotationKey
    value: str

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        if len(value.encode()) > MAX_ANNOTATION_BYTES:
            raise ValueError(f"annotation value longer than {MAX_ANNOTATION_BYTES} bytes")
        return value


class UnsetParams(StrictParams):
    key: str | None = None
    value: str | None = None


class _SetEntry(Action[LabelParams | AnnotationParams]):
    """Set one key of node metadata.labels or metadata.annotations, remembering the previous value."""

    field: Literal["labels", "annotations"]
    what: str

    def check(self, key: str, value: str) -> None:
        raise NotImplementedError

    async def plan(self, ctx: ActionContext, params: LabelParams | AnnotationParams) -> ActionResult:
        key, value = params.key, params.value
        self.check(key, value)
        name = target_node(ctx)
        return planned(f"would set {self.what} {key}={value} on node {name}", {"node": name, "key": key})

    async def apply(self, ctx: ActionContext, params: LabelParams | AnnotationParams) -> ActionResult:
        key, value = params.key, params.value
        self.check(key, value)
        name = target_node(ctx)
        kube = require_kube(ctx)
        node = await kube.get_node(name)
        current = _meta_map(node, self.field).get(key)
        prior = await _remember(ctx, {"previous": current})
        changed = current != value
        if changed:
            await kube.patch_node(name, {"metadata": {self.field: {key: value}}})
        output = {"node": name, "key": key, "value": value, "previous": prior["previous"]}
        verb = "set" if changed else "already set"
        return ActionResult(
            changed=changed, message=f"node {name}: {self.what} {key}={value} {verb}", output=output
        )


class _UnsetEntry(Action[UnsetParams]):
    """Remove one label/annotation key, or put back the value it had before the remediation."""

    Params = UnsetParams
    field: Literal["labels", "annotations"]
    what: str

    def _key(self, ctx: ActionContext, params: UnsetParams) -> str:
        key = params.key or (ctx.prior_output or {}).get("key")
        if not key:
            raise Invalid(f"{self.name}: no key given and no forward step output to undo")
        return str(key)

    async def plan(self, ctx: ActionContext, params: UnsetParams) -> ActionResult:
        key = self._key(ctx, params)
        name = target_node(ctx)
        return planned(f"would remove {self.what} {key} from node {name}", {"node": name, "key": key})

    async def apply(self, ctx: ActionContext, params: UnsetParams) -> ActionResult:
        prior = ctx.prior_output
        key = self._key(ctx, params)
        name = target_node(ctx)
        kube = require_kube(ctx)
        node = await kube.get_node(name)
        current = _meta_map(node, self.field).get(key)
        wanted = _restored_entry(current, prior)
        changed = wanted != current
        if changed:
            await kube.patch_node(name, {"metadata": {self.field: {key: wanted}}})
        verb = ("restored to " + repr(wanted)) if wanted is not None else "removed"
        message = (
            f"node {name}: {self.what} {key} {verb}"
            if changed
            else f"node {name}: {self.what} {key} unchanged"
        )
        return ActionResult(changed=changed, message=message, output={"node": name, "key": key})


def _restored_entry(current: str | None, prior: Mapping[str, JsonValue] | None) -> str | None:
    if prior is None or current is None:
        return None
    if current != prior.get("value"):
        return current  # rewritten by someone else since: theirs now
    previous = prior.get("previous")
    return None if previous is None else str(previous)


class Label(_SetEntry):
    name = "label"
    Params = LabelParams
    default_revert = "unlabel"
    field = "labels"
    what = "label"

    def check(self, key: str, value: str) -> None:
        _checked("label key", key, qualified_name_problem(key))
        _checked("label value", value, label_value_problem(value))


class Unlabel(_UnsetEntry):
    name = "unlabel"
    field = "labels"
    what = "label"


class Annotate(_SetEntry):
    name = "annotate"
    Params = AnnotationParams
    default_revert = "unannotate"
    field = "annotations"
    what = "annotation"

    def check(self, key: str, value: str) -> None:
        _checked("annotation key", key, qualified_name_problem(key.lower()))
        if len(value.encode()) > MAX_ANNOTATION_BYTES:
            raise Invalid(f"annotation {key} value longer than {MAX_ANNOTATION_BYTES} bytes")


class Unannotate(_UnsetEntry):
    name = "unannotate"
    field = "annotations"
    what = "annotation"
