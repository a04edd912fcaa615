"""The `event` action: a core/v1 Event on the node or on the affected pods, so `kubectl describe` shows it.

Events are named from the remediation, the step and the object, so re-running the step after a crash
finds its own event (409 AlreadyExists) instead of posting a second one.

`object: node | pods | instance_pods` says where the event goes (`instance_pods`: only the pods of the MIG GPU
instance the alert names, engine/gpu_instance.py; none when the node agent did not name them). Its old name
`on:` is still accepted (plans stored before the rename carry it): YAML 1.1 tools (PyYAML, Helm, kubectl,
yamllint's truthy rule) read the key `on` as the boolean true, so definitions should spell it `object`;
`remediator check` warns about the old key.
"""

from __future__ import annotations

import builtins
import hashlib
import time
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from remediator.actions.base import Action, ActionContext, ActionResult, StrictParams, planned
from remediator.actions.node import require_kube, target_node
from remediator.adapters.kube import FIELD_MANAGER, KubeAdapter
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import Conflict, Invalid
from remediator.kube.views import Body, as_list, as_mapping, json_object, json_value

__all__ = ["EventParams", "RecordKubeEvent", "event_body"]

MAX_MESSAGE = 1024
NODE_EVENT_NAMESPACE = "default"


class EventParams(StrictParams):
    reason: str = Field(min_length=1, max_length=128)
    message: str
    type: Literal["Normal", "Warning"] = "Warning"
    object: Literal["node", "pods", "instance_pods"] = "node"

    # old key -> (its name now, why it changed); accepted, and reported by the definition checks
    deprecated_keys: ClassVar[dict[str, tuple[str, str]]] = {
        "on": ("object", "YAML 1.1 tools such as PyYAML, Helm, kubectl and yamllint read the key `on` as true"),
    }

    @model_validator(mode="before")
    @classmethod
    def _old_key(cls, data: builtins.object) -> builtins.object:
        if not isinstance(data, Mapping) or "on" not in data:
            return data
        data = dict(data)
        old = data.pop("on")
        if "object" in data and data["object"] != old:
            raise ValueError("give `object` only: `on` is its deprecated name")
        data.setdefault("object", old)
        return data


def _event_name(involved: Mapping[str, object], ctx: ActionContext) -> str:
    seed = f"{ctx.remediation_id}/{ctx.step_name}/{involved.get('uid') or involved.get('name')}"
    digest = hashlib.sha256(seed.encode()).hexdigest()[:16]
    return f"{str(involved['name'])[:200]}.{digest}"


def event_body(
    involved: Mapping[str, object], namespace: str, params: EventParams, ctx: ActionContext
) -> JsonObject:
    """A legacy core/v1 Event (no eventTime): its namespace must match the involved object's."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": _event_name(involved, ctx), "namespace": namespace},
        "involvedObject": json_object(involved),
        "reason": params.reason,
        "message": params.message[:MAX_MESSAGE],
        "type": params.type,
        "source": {"component": FIELD_MANAGER},
        "reportingComponent": FIELD_MANAGER,
        "reportingInstance": ctx.settings.replica_id or FIELD_MANAGER,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


async def _post(kube: KubeAdapter, namespace: str, body: Mapping[str, object]) -> bool:
    try:
        await kube.create_event(namespace, body)
    except Conflict:
        return False  # posted by an earlier attempt of this step
    return True


def _instance_pods(ctx: ActionContext) -> list[Mapping[str, object]]:
    """The pods of the MIG GPU instance the alert names (context `instance_pods`, engine/gpu_instance.py); none
    when the node agent did not name them (the event then goes nowhere rather than to the whole GPU's pods)."""
    mapping = ctx.gathered.get("instance_pods")
    if not isinstance(mapping, Mapping):
        return []
    return [p for entries in mapping.values() if isinstance(entries, list) for p in entries if isinstance(p, Mapping)]


def _pod_targets(
    ctx: ActionContext, pods: list[Mapping[str, object]] | None = None
) -> list[tuple[str, JsonObject]]:
    targets = []
    for pod in [as_mapping(p) for p in as_list(ctx.gathered.get("pods"))] if pods is None else pods:
        if not pod.get("namespace") or not pod.get("name"):
            continue
        involved: JsonObject = {"apiVersion": "v1", "kind": "Pod", "namespace": json_value(pod["namespace"]),
                                "name": json_value(pod["name"])}
        if pod.get("uid"):
            involved["uid"] = json_value(pod["uid"])
        targets.append((str(pod["namespace"]), involved))
    return targets


class RecordKubeEvent(Action[EventParams]):
    """Record a Kubernetes Event (reason, message) on the node or on the pods in the context.

    Not the state machine's `Event` (domain/states.py): this is the `event` action a playbook step names."""

    name = "event"
    Params = EventParams
    mutating = False

    async def plan(self, ctx: ActionContext, params: EventParams) -> ActionResult:
        return planned(
            f"would record event {params.reason} on the {params.object}",
            {"object": params.object, "reason": params.reason},
        )

    async def apply(self, ctx: ActionContext, params: EventParams) -> ActionResult:
        p = params
        kube = require_kube(ctx)
        targets = await self._targets(kube, ctx, p)
        posted = []
        for namespace, involved in targets:
            if await _post(kube, namespace, event_body(involved, namespace, p, ctx)):
                posted.append(f"{involved['kind']}/{involved['name']}")
        message = (
            f"event {p.reason} recorded on {', '.join(posted)}"
            if posted
            else f"event {p.reason}: nothing new"
        )
        return ActionResult(changed=bool(posted), message=message,
                            output={"object": p.object, "objects": list[JsonValue](posted)})

    async def _targets(
        self, kube: KubeAdapter, ctx: ActionContext, p: EventParams
    ) -> list[tuple[str, JsonObject]]:
        if p.object == "pods":
            return _pod_targets(ctx)
        if p.object == "instance_pods":
            return _pod_targets(ctx, _instance_pods(ctx))
        name = target_node(ctx)
        node = await kube.get_node(name)
        uid = Body(node).uid
        if not uid:
            raise Invalid(f"node {name} has no uid")
        return [(NODE_EVENT_NAMESPACE, {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid})]
