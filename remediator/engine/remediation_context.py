"""A remediation's context: what its admission reads about the node, its pods and its GPU before deciding.

The node and its pods with their owners come from the Kubernetes API (remediator/actions/context.py:
`gather`); for an alert that names a GPU, the node agent (sidecar) says which pods use that GPU (and, for a
MIG GPU instance, which use that instance), else the alert's own pod label (dcgm-exporter) narrows them. The
worker reads it ahead while the decision commits (engine/early_contexts.py); the admission stores it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from remediator.actions.base import Target
from remediator.actions.context import Gathered, alert_pod, exporter_gpu_context, gather
from remediator.engine.gpu_instance import instance_context
from remediator.engine.runtime import Runtime
from remediator.errors import ActionError

__all__ = ["gpu_context", "read_context"]

log = logging.getLogger(__name__)


async def read_context(rt: Runtime, target: Target, labels: Mapping[str, str], rem_id: str | None) -> Gathered:
    """A remediation's context: node, pods and owners (`gather_context`), then its GPU's pods (sidecar).
    `rem_id` names the remediation in logs (None when read ahead of the decision: ContextPrefetch)."""
    gathered = await gather(rt.kube, target, labels, rt.settings)
    return Gathered(await gpu_context(rt, target, gathered.context, rem_id, labels), gathered.node)


async def gpu_context(
    rt: Runtime, target: Target, context: dict[str, Any], rem_id: str | None, labels: Mapping[str, str] | None = None
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
    if (target.gpu_uuid is None and target.gpu_index is None) or rt.kube is None:
        return context
    context = {**context, "gpu_uuid": target.gpu_uuid}
    ip = (context.get("node") or {}).get("internal_ip")
    sidecar = rt.sidecar
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
    named = alert_pod(labels or {}, target, rt.settings.exporter_pod_prefixes)
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
