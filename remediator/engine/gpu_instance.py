"""The pods of one MIG GPU instance, for alerts that name it (label `gpu_instance`, the `GPU-I:NN` of an Xid line).

On a MIG GPU the driver attributes a contained fault (Xid 94, and others with `GPU-I:` on the line) to one GPU
instance: only that instance's pods were hit, the other instances of the GPU run on. The node detector keeps
the instance as the alert's `gpu_instance` label; here the controller asks the node agent for the pods of that
instance's MIG device (`GET /v1/gpus/{uuid}/pods?gpu_instance=N`) and records them in the remediation's
context, so a drain (`pods: instance:<uuid>/<N>`) and an event (`object: instance_pods`) reach those pods and
no others. An alert without the label, or with a value that is not a GPU instance id, changes nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from remediator.errors import ActionError

if TYPE_CHECKING:
    from remediator.adapters.sidecar import SidecarClient

__all__ = ["INSTANCE_LABEL", "instance_context", "instance_key", "instance_of"]

log = logging.getLogger(__name__)

INSTANCE_LABEL = "gpu_instance"
_ID = re.compile(r"[0-9]{1,4}")


def instance_of(labels: Mapping[str, str] | None) -> int | None:
    """The GPU instance id the alert names (decimal, as the detector writes it), or None."""
    value = str((labels or {}).get(INSTANCE_LABEL) or "").strip()
    return int(value) if _ID.fullmatch(value) else None


def instance_key(uuid: str, gpu_instance: int) -> str:
    """The key of `instance_pods` and of a drain's `instance:<uuid>/<N>` selector."""
    return f"{uuid}/{gpu_instance}"


async def instance_context(
    sidecar: SidecarClient, ip: str, uuid: str, labels: Mapping[str, str] | None, rem: str
) -> dict[str, Any]:
    """What the context gains for an alert naming a GPU instance of GPU `uuid`: `gpu_instance` and
    `instance_pods` = {"<uuid>/<N>": [{namespace, name, uid, active}]} when the node agent answers, else
    `gpu_instance` and `gpu_instance_error` (a drain of the instance then falls back to the GPU's pods).
    Never raises: a node agent problem must not block admission."""
    gpu_instance = instance_of(labels)
    if gpu_instance is None:
        return {}
    try:
        answer = await sidecar.gpu_pods(ip, uuid, gpu_instance=gpu_instance, attempts=1)
    except ActionError as exc:
        return {"gpu_instance": gpu_instance, "gpu_instance_error": exc.message}
    except Exception as exc:  # an unexpected answer must not block admission
        log.warning("GPU instance context for remediation %s failed", rem, exc_info=True)
        return {"gpu_instance": gpu_instance, "gpu_instance_error": f"{type(exc).__name__}: {exc}"}
    pods = [
        {"namespace": p.namespace, "name": p.name, "uid": p.uid, "active": p.active}
        for p in answer.pods
    ]
    return {
        "gpu_instance": gpu_instance,
        "instance_pods": {instance_key(uuid, gpu_instance): pods},
        "instance_uuid": answer.uuid,
    }
