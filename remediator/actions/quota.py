"""Namespace GPU quota: `reclaim_quota` lowers a ResourceQuota's GPU limits, `restore_quota` puts them back.

The GPU keys of a quota are `requests.nvidia.com/gpu`, `limits.nvidia.com/gpu` (and the bare
`nvidia.com/gpu`) and the same forms of every MIG profile (`nvidia.com/mig-*`). A step lowers them by an
amount (one number for every key, or per resource, e.g. what `scale_workload` freed) or to a value. It
never raises a limit, and never lowers one below what the namespace uses now (`status.used`, else the
pods' requests) unless the step says so (`below_usage: clamp | allow`); usage that is about to drop (pods
of a workload just scaled down) can be waited for with `usage_wait`. A key the quota did not have is
added only by `to:` with an explicit `resources:` list or on a quota without any GPU key.

The original value of every key is checkpointed before the first write (absent keys as null), and
`restore_quota` writes exactly those back, deleting a key that did not exist before. A key that someone
else changed since is left as they set it and reported.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Literal

from pydantic import Field, field_validator, model_validator

from remediator.actions.base import Action, ActionContext, ActionResult, NoParams, StrictParams, Target, planned
from remediator.actions.node import require_kube
from remediator.actions.workload import idle_pods, pod_gpu_resources, single_namespace
from remediator.adapters.kube import KubeAdapter, KubeObject
from remediator.domain.durations import DurationText, parse_duration
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import Invalid, NotFound, StepFailed
from remediator.kube.views import Body, Pod, ResourceQuota, as_list, as_mapping, json_object, json_value

__all__ = ["ReclaimQuota", "ReclaimQuotaParams", "RestoreQuota", "gpu_quota_key", "quota_resource"]

DEFAULT_NEW_KEYS = ("requests.nvidia.com/gpu",)
FINISHED_PHASES = ("Succeeded", "Failed")
USAGE_POLL_SECONDS = 2.0

_GPU_KEY = re.compile(r"^(requests\.|limits\.)?nvidia\.com/(gpu|mig-[A-Za-z0-9][-A-Za-z0-9_.]*)$")

Amount = int | dict[str, int]


def gpu_quota_key(key: str) -> bool:
    """True for the quota keys this module manages (GPU and MIG requests/limits)."""
    return bool(_GPU_KEY.match(key))


def quota_resource(key: str) -> str:
    """`requests.nvidia.com/gpu` -> `nvidia.com/gpu`."""
    return key.removeprefix("requests.").removeprefix("limits.")


def _quantity(value: object) -> int | None:
    """A GPU quota quantity as an integer (GPUs are counted whole); None when absent or unreadable."""
    if value is None:
        return None
    text = str(value).strip()
    suffixes = {"k": 10**3, "M": 10**6, "G": 10**9}
    factor = 1
    if text and text[-1] in suffixes:
        factor, text = suffixes[text[-1]], text[:-1]
    try:
        return int(Decimal(text) * factor)
    except InvalidOperation:
        return None


class ReclaimQuotaParams(StrictParams):
    namespace: str | None = None
    quota: str | None = None
    by: Amount | None = None
    to: Amount | None = None
    resources: list[str] = Field(default_factory=list)
    below_usage: Literal["refuse", "clamp", "allow"] = "refuse"
    usage_wait: DurationText = "0s"

    @field_validator("by", "to")
    @classmethod
    def _non_negative(cls, value: Amount | None) -> Amount | None:
        amounts = value.values() if isinstance(value, dict) else [] if value is None else [value]
        if any(a < 0 for a in amounts):
            raise ValueError("amounts must not be negative")
        return value

    @field_validator("resources")
    @classmethod
    def _keys(cls, value: list[str]) -> list[str]:
        bad = [k for k in value if not gpu_quota_key(k)]
        if bad:
            raise ValueError(f"not GPU quota keys: {', '.join(bad)} (e.g. requests.nvidia.com/gpu)")
        return value

    @model_validator(mode="after")
    def _one_amount(self) -> ReclaimQuotaParams:
        if (self.by is None) == (self.to is None):
            raise ValueError("give exactly one of `by` (lower by) and `to` (lower to)")
        return self


def _hard(quota: Mapping[str, object]) -> dict[str, object]:
    return dict(ResourceQuota(quota).hard)


def _wanted(p: ReclaimQuotaParams, key: str, original: int | None) -> int | None:
    """The value `key` should get, or None when this step leaves it alone."""
    resource = quota_resource(key)
    if p.to is not None:
        target = p.to.get(resource) if isinstance(p.to, dict) else p.to
        if target is None:
            return None
        return target if original is None else min(original, target)
    if original is None:
        return None  # no limit: nothing to lower by
    amount = p.by.get(resource) if isinstance(p.by, dict) else p.by
    if not amount:
        return None
    return max(0, original - amount)


def _keys_for(p: ReclaimQuotaParams, hard: Mapping[str, object]) -> list[str]:
    present = [k for k in hard if gpu_quota_key(k)]
    if p.resources:
        if p.to is not None:
            return list(dict.fromkeys([*p.resources]))
        return [k for k in p.resources if k in hard]
    if present or p.to is None:
        return present
    if isinstance(p.to, dict):
        return [f"requests.{r}" for r in p.to]
    return list(DEFAULT_NEW_KEYS)


async def _pod_usage(kube: KubeAdapter, namespace: str) -> dict[str, int]:
    usage: dict[str, int] = {}
    for pod in await kube.list_pods(namespace):
        if Pod(pod).phase in FINISHED_PHASES:
            continue
        for name, amount in pod_gpu_resources(Pod(pod).spec).items():
            usage[name] = usage.get(name, 0) + amount
    return usage


async def _usage(kube: KubeAdapter, quota: Mapping[str, object], key: str, namespace: str) -> int:
    used = _quantity(ResourceQuota(quota).used.get(key))
    if used is not None:
        return used
    return (await _pod_usage(kube, namespace)).get(quota_resource(key), 0)


async def _quotas(kube: KubeAdapter, namespace: str, p: ReclaimQuotaParams) -> list[KubeObject]:
    if p.quota:
        try:
            return [await kube.get_resource_quota(namespace, p.quota)]
        except NotFound:
            raise StepFailed(f"ResourceQuota {namespace}/{p.quota} does not exist") from None
    quotas = await kube.list_resource_quotas(namespace)
    with_gpu = [q for q in quotas if any(gpu_quota_key(k) for k in _hard(q))]
    if with_gpu:
        return with_gpu
    if p.to is not None and len(quotas) == 1:
        return quotas  # one quota without a GPU limit: `to` caps GPUs in it
    return []


def namespace_for(ctx: ActionContext, explicit: str | None) -> str:
    if explicit:
        return explicit
    namespace = single_namespace(idle_pods(ctx.gathered, ctx.target)) or ctx.target.namespace
    if not namespace:
        raise Invalid(f"{ctx.step_name}: no namespace given and none known from the idle pods")
    return namespace


class ReclaimQuota(Action[ReclaimQuotaParams]):
    """Lower a namespace's GPU ResourceQuota by an amount or to a value, never below its usage by default."""

    name = "reclaim_quota"
    Params = ReclaimQuotaParams
    default_revert = "restore_quota"

    async def plan(self, ctx: ActionContext, params: ReclaimQuotaParams) -> ActionResult:
        """With a cluster: the same reading and arithmetic as `apply`, without the writes."""
        if ctx.kube is None:
            namespace = namespace_for(ctx, params.namespace)
            return planned(
                f"would lower the GPU quota of namespace {namespace}", {"namespace": namespace, "quotas": []}
            )
        return await self._reclaim(ctx, params, write=False)

    async def apply(self, ctx: ActionContext, params: ReclaimQuotaParams) -> ActionResult:
        return await self._reclaim(ctx, params, write=True)

    async def _reclaim(self, ctx: ActionContext, p: ReclaimQuotaParams, *, write: bool) -> ActionResult:
        namespace = namespace_for(ctx, p.namespace)
        kube = require_kube(ctx)
        prior = {str(k): json_object(as_mapping(v)) for k, v in as_mapping(ctx.progress.get("prior")).items()}
        results: list[JsonObject] = []
        for quota in await _quotas(kube, namespace, p):
            name = str(Body(quota).name)
            if name not in prior:
                prior[name] = {k: json_value(_hard(quota).get(k)) for k in _keys_for(p, _hard(quota))}
                ctx.progress["prior"] = dict(prior)
                await ctx.checkpoint(dict(ctx.progress))
            results.append(await self._one(kube, namespace, name, prior[name], p, write=write))
        changes = [as_mapping(c) for r in results for c in as_list(r["changes"])]
        lowered: dict[str, int] = {}
        for change in changes:
            if not str(change["key"]).startswith("limits."):
                resource = quota_resource(str(change["key"]))
                before = _quantity(change["previous"])
                reduction = (before - int(str(change["value"]))) if before is not None else 0
                lowered[resource] = max(lowered.get(resource, 0), reduction)
        output: JsonObject = {
            "namespace": namespace,
            "quotas": list[JsonValue](results),
            "lowered": {k: v for k, v in lowered.items() if v > 0},
        }
        if not write:
            output["dry_run"] = True
        changed = bool(changes) and write
        if not results:
            message = f"namespace {namespace} has no ResourceQuota with a GPU limit: nothing to reclaim"
        else:
            shown = "; ".join(
                f"{c['quota']} {c['key']} {c['previous'] or 'unset'} -> {c['value']}" for c in changes
            )
            verb = "lowered" if write else "would lower"
            message = f"{verb} {shown}" if shown else f"namespace {namespace}: GPU quota already at or below target"
        return ActionResult(changed=changed, message=message, output=output)

    async def _one(
        self,
        kube: KubeAdapter,
        namespace: str,
        name: str,
        originals: Mapping[str, JsonValue],
        p: ReclaimQuotaParams,
        *,
        write: bool,
    ) -> JsonObject:
        quota = await kube.get_resource_quota(namespace, name)
        plan: dict[str, int] = {}
        notes: list[str] = []
        for key, original in originals.items():
            wanted = _wanted(p, key, _quantity(original))
            if wanted is None:
                continue
            floor = await self._floor(kube, quota, key, namespace, wanted, p)
            if floor > wanted:
                if p.below_usage == "refuse":
                    raise StepFailed(
                        f"ResourceQuota {namespace}/{name}: lowering {key} to {wanted} would put it below "
                        f"what the namespace uses now ({floor}); refused (below_usage: clamp or allow to "
                        "change that)",
                        details={"quota": name, "key": key, "wanted": wanted, "used": floor},
                    )
                notes.append(f"{key} clamped to usage {floor}")
                wanted = floor
            plan[key] = wanted
        quota = await kube.get_resource_quota(namespace, name)
        hard = _hard(quota)
        patch = {k: str(v) for k, v in plan.items() if _quantity(hard.get(k)) != v}
        if patch and write:
            rv = Body(quota).resource_version
            await kube.patch_resource_quota(
                namespace, name, {"metadata": {"resourceVersion": rv}, "spec": {"hard": patch}}
            )
        changes: list[JsonValue] = [
            {"quota": name, "key": k, "previous": originals.get(k), "value": str(v)}
            for k, v in plan.items()
            if _quantity(originals.get(k)) != v
        ]
        return {"name": name, "changes": changes, "written": bool(patch) and write, "notes": list[JsonValue](notes)}

    @staticmethod
    async def _floor(
        kube: KubeAdapter, quota: Mapping[str, object], key: str, namespace: str, wanted: int, p: ReclaimQuotaParams
    ) -> int:
        """What the namespace uses of `key`; with usage_wait, waits for usage to drop to `wanted`."""
        if p.below_usage == "allow":
            return 0
        used = await _usage(kube, quota, key, namespace)
        remaining = parse_duration(p.usage_wait).total_seconds()
        while used > wanted and remaining > 0:
            pause = min(USAGE_POLL_SECONDS, remaining)
            await asyncio.sleep(pause)
            remaining -= pause
            fresh = await kube.get_resource_quota(namespace, str(Body(quota).name))
            used = await _usage(kube, fresh, key, namespace)
        return used

    def describe(self, target: Target, params: ReclaimQuotaParams) -> str:
        p = params
        how = f"by {p.by}" if p.by is not None else f"to {p.to}"
        where = p.namespace or "the idle pods' namespace"
        return f"lower the GPU ResourceQuota of {where} {how} (never below usage: {p.below_usage})"


class RestoreQuota(Action[NoParams]):
    """Write back the GPU quota values `reclaim_quota` found, removing keys that were absent before."""

    name = "restore_quota"
    Params = NoParams

    def _undo(self, ctx: ActionContext) -> tuple[str, list[Mapping[str, object]]]:
        """(namespace, the changes reclaim_quota made)."""
        prior = ctx.prior_output
        if prior is None:
            raise Invalid(f"{self.name}: no reclaim_quota output to undo")
        changes = [as_mapping(c) for q in as_list(prior.get("quotas")) for c in as_list(as_mapping(q).get("changes"))]
        return str(prior.get("namespace") or ""), changes

    async def plan(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        namespace, changes = self._undo(ctx)
        return planned(f"would restore {len(changes)} GPU quota value(s) in {namespace}",
                       {"namespace": namespace, "restored": []})

    async def apply(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        namespace, changes = self._undo(ctx)
        kube = require_kube(ctx)
        by_quota: dict[str, list[Mapping[str, object]]] = {}
        for change in changes:
            by_quota.setdefault(str(change["quota"]), []).append(change)
        restored: list[JsonObject] = []
        left: list[JsonObject] = []
        for name, entries in by_quota.items():
            try:
                quota = await kube.get_resource_quota(namespace, name)
            except NotFound:
                left.extend({"quota": name, "key": json_value(e["key"]), "reason": "quota deleted"} for e in entries)
                continue
            hard = _hard(quota)
            patch: JsonObject = {}
            for entry in entries:
                key = str(entry["key"])
                if _quantity(hard.get(key)) != _quantity(entry["value"]):
                    left.append({"quota": name, "key": key, "reason": f"changed since to {hard.get(key)}"})
                    continue
                previous = json_value(entry.get("previous"))
                patch[key] = previous
                restored.append({"quota": name, "key": key, "value": previous})
            if patch:
                rv = Body(quota).resource_version
                await kube.patch_resource_quota(
                    namespace, name, {"metadata": {"resourceVersion": rv}, "spec": {"hard": patch}}
                )
        shown = ", ".join(f"{r['quota']} {r['key']}={r['value'] or '(removed)'}" for r in restored)
        message = f"restored {shown}" if restored else "no GPU quota value to restore"
        if left:
            message += "; left as others set them: " + ", ".join(f"{x['quota']} {x['key']}" for x in left)
        return ActionResult(
            changed=bool(restored), message=message,
            output={"namespace": namespace, "restored": list[JsonValue](restored), "left": list[JsonValue](left)},
        )
