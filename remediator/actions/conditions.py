"""Node conditions: say on the Node itself that its GPU is unhealthy (`GPUHealthy=False`), and that it healed.

node-problem-detector consumers, medik8s NodeHealthCheck and cluster autoscalers read
`status.conditions`, not this controller's taints, so a quarantine is also published there. Writes go
through the `nodes/status` subresource (a patch of the Node itself cannot change status) as a strategic
merge patch, which merges the conditions list by `type`: other conditions (Ready, MemoryPressure, those of
node-problem-detector) are never touched. Writes are idempotent: nothing is written when the condition
already has the wanted status, reason and message, and `lastTransitionTime` moves only when the status
changes. The write carries the resourceVersion it was computed from and is recomputed on a conflict.

`clear_node_condition` is the default revert: it sets the condition True with reason `Recovered`, unless
the condition is no longer the one this step wrote (someone else has spoken since: theirs stands), or
another writer had it False before this remediation (their finding is put back, not overwritten).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal

from pydantic import Field, field_validator

from remediator.actions.base import Action, ActionContext, ActionResult, StrictParams, planned
from remediator.actions.node import require_kube, target_node
from remediator.adapters.kube import KubeAdapter, KubeObject
from remediator.domain.json_values import JsonObject
from remediator.errors import Conflict, StepFailed
from remediator.kube.views import Node, as_str, json_object
from remediator.retrying import CONFLICT_ATTEMPTS, on_conflict

__all__ = [
    "DEFAULT_CONDITION",
    "RECOVERED_REASON",
    "ClearNodeCondition",
    "SetNodeCondition",
    "condition_word_problem",
]

DEFAULT_CONDITION = "GPUHealthy"
RECOVERED_REASON = "Recovered"
MAX_MESSAGE = 1024
_CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]{0,127}$")

ConditionStatus = Literal["True", "False", "Unknown"]


def condition_word_problem(value: str) -> str | None:
    """Why `value` is not a CamelCase condition type or reason (e.g. GPUHealthy, Xid79), or None."""
    if _CAMEL.fullmatch(value):
        return None
    return "must be CamelCase: a capital letter, then up to 127 letters and digits (e.g. GPUHealthy, Xid79)"


def _word(what: str, value: str) -> str:
    problem = condition_word_problem(value)
    if problem is not None:
        raise ValueError(f"invalid condition {what} {value!r}: {problem}")
    return value


class SetConditionParams(StrictParams):
    type: str = DEFAULT_CONDITION
    # YAML's bare True/False arrive as booleans; the API wants the strings.
    status: ConditionStatus
    reason: str
    message: str = Field(default="", max_length=32768)

    @field_validator("status", mode="before")
    @classmethod
    def _status(cls, value: object) -> object:
        return str(value) if isinstance(value, bool) else value

    @field_validator("type")
    @classmethod
    def _type(cls, value: str) -> str:
        return _word("type", value)

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        return _word("reason", value)

    @field_validator("message")
    @classmethod
    def _message(cls, value: str) -> str:
        value = " ".join(value.split())
        return value if len(value) <= MAX_MESSAGE else value[: MAX_MESSAGE - 1] + "…"


class ClearConditionParams(StrictParams):
    type: str = DEFAULT_CONDITION

    @field_validator("type")
    @classmethod
    def _type(cls, value: str) -> str:
        return _word("type", value)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _find(node: Mapping[str, object], kind: str) -> JsonObject | None:
    condition = Node(node).condition(kind)
    return None if condition is None else json_object(condition.raw)


def _same(current: Mapping[str, object] | None, status: str, reason: str, message: str) -> bool:
    return current is not None and (
        current.get("status"),
        current.get("reason") or "",
        current.get("message") or "",
    ) == (status, reason, message)


def _condition(
    current: Mapping[str, object] | None, kind: str, status: str, reason: str, message: str
) -> JsonObject:
    now = _now()
    moved = current is None or current.get("status") != status
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now if moved else as_str((current or {}).get("lastTransitionTime")) or now,
    }


async def write_condition(
    kube: KubeAdapter, name: str, kind: str, status: str, reason: str, message: str
) -> tuple[KubeObject | None, JsonObject | None]:
    """Make the node's condition `kind` say (status, reason, message); (node read last, condition written or
    None when it already said so)."""
    try:
        async for attempt in on_conflict(Conflict):
            with attempt:
                node = await kube.get_node(name)
                current = _find(node, kind)
                if _same(current, status, reason, message):
                    return node, None
                condition = _condition(current, kind, status, reason, message)
                patch: JsonObject = {
                    "metadata": {"resourceVersion": Node(node).resource_version},
                    "status": {"conditions": [condition]},
                }
                await kube.patch_node_status(name, patch)
                return node, condition
    except Conflict:
        raise StepFailed(f"node {name} kept changing under us ({CONFLICT_ATTEMPTS} attempts)") from None
    raise AssertionError("unreachable")  # pragma: no cover


class SetNodeCondition(Action[SetConditionParams]):
    """Set one node condition (default GPUHealthy) through nodes/status; reverted by clear_node_condition."""

    name = "set_node_condition"
    Params = SetConditionParams
    default_revert = "clear_node_condition"

    @staticmethod
    def _said(ctx: ActionContext, p: SetConditionParams) -> tuple[str, str, JsonObject]:
        """(node, `type=status (reason)`, output)."""
        name = target_node(ctx)
        output: JsonObject = {"node": name, "type": p.type, "status": p.status, "reason": p.reason,
                              "message": p.message}
        return name, f"{p.type}={p.status} ({p.reason})", output

    async def plan(self, ctx: ActionContext, params: SetConditionParams) -> ActionResult:
        name, said, output = self._said(ctx, params)
        return planned(f"would set condition {said} on node {name}", output)

    async def apply(self, ctx: ActionContext, params: SetConditionParams) -> ActionResult:
        p = params
        name, said, output = self._said(ctx, p)
        kube = require_kube(ctx)
        prior = ctx.progress.get("prior")
        if not isinstance(prior, dict):
            node = await kube.get_node(name)
            prior = {"previous": _find(node, p.type)}
            ctx.progress["prior"] = prior
            await ctx.checkpoint(dict(ctx.progress))
        _, written = await write_condition(kube, name, p.type, p.status, p.reason, p.message)
        output["previous"] = prior["previous"]
        verb = "set" if written else "already says"
        return ActionResult(changed=written is not None, message=f"node {name}: condition {verb} {said}",
                            output=output)


class ClearNodeCondition(Action[ClearConditionParams]):
    """Undo set_node_condition: the condition becomes True/Recovered, unless it is someone else's now."""

    name = "clear_node_condition"
    Params = ClearConditionParams

    async def plan(self, ctx: ActionContext, params: ClearConditionParams) -> ActionResult:
        name = target_node(ctx)
        kind = str((ctx.prior_output or {}).get("type") or params.type)
        return planned(f"would set condition {kind}=True on node {name}", {"node": name, "type": kind})

    async def apply(self, ctx: ActionContext, params: ClearConditionParams) -> ActionResult:
        name = target_node(ctx)
        forward = ctx.prior_output or {}
        kind = str(forward.get("type") or params.type)
        kube = require_kube(ctx)
        node = await kube.get_node(name)
        current = _find(node, kind)
        output: JsonObject = {"node": name, "type": kind}
        if forward and current is not None and not _same(
            current, str(forward.get("status")), str(forward.get("reason") or ""), str(forward.get("message") or "")
        ):
            return ActionResult(changed=False, output={**output, "kept": current},
                                message=f"node {name}: condition {kind} was changed by someone else since; left alone")
        previous = forward.get("previous")
        if isinstance(previous, Mapping) and previous.get("status") != "True":
            target = (str(previous.get("status")), str(previous.get("reason") or ""),
                      str(previous.get("message") or ""))
            verb = "restored to what it said before"
        else:
            target = ("True", RECOVERED_REASON, f"GPU fault cleared (remediation {ctx.remediation_id})")
            verb = "set"
        _, written = await write_condition(kube, name, kind, *target)
        said = f"{kind}={target[0]} ({target[1]})"
        return ActionResult(changed=written is not None, output={**output, "status": target[0], "reason": target[1]},
                            message=f"node {name}: condition {verb} {said}" if written
                            else f"node {name}: condition already says {said}")
