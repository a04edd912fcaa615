"""The GPU Operator's operands taken off a node for a GPU reset, and brought back after it.

On a GPU Operator node the DCGM host engine (standalone or embedded in dcgm-exporter), the device plugin and
gpu-feature-discovery hold the GPU, so NVIDIA's reset is refused (or would pull the device from under DCGM).
The GPU Operator's own driver manager solves the same problem for driver upgrades with the node labels
`nvidia.com/gpu.deploy.<operand>`: each operand's DaemonSet selects nodes where its label is "true", so a
label set to "false" makes the DaemonSet controller remove that operand's pod from the node, and the previous
value brings it back. The pods of an operand on the node are those whose nodeSelector names its label.

The previous values are checkpointed (the step's progress) before any label changes, so a controller that
dies in the middle restores them when the step resumes (GpuReset in remediator/actions/gpu.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from remediator.adapters.kube import KubeAdapter
from remediator.domain.json_values import JsonObject
from remediator.errors import StepFailed
from remediator.kube.views import Node, Pod, as_mapping, json_value

__all__ = ["DEPLOY_LABEL_PREFIX", "operand_pods", "restore_operands", "take_operands_off", "wait_for"]

DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
POLL_SECONDS = 0.5


def deploy_label(operand: str) -> str:
    return DEPLOY_LABEL_PREFIX + operand


def operand_pods(pods: Sequence[Mapping[str, object]], label: str) -> list[Mapping[str, object]]:
    """The pods (of one node) whose nodeSelector names `label`: the operand's DaemonSet pods there."""
    return [p for p in pods if label in Pod(p).pod_spec.node_selector and not Pod(p).deletion_timestamp]


def _ready(pod: Mapping[str, object]) -> bool:
    return Pod(pod).ready


async def wait_for(
    kube: KubeAdapter, node: str, done: Callable[[Sequence[Mapping[str, object]]], bool], *, timeout: float, what: str
) -> Sequence[Mapping[str, object]]:
    """Poll the node's pods until `done(pods)` is true; StepFailed naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        pods = await kube.list_pods_on_node(node)
        if done(pods):
            return pods
        if time.monotonic() >= deadline:
            raise StepFailed(f"timed out after {timeout:g}s waiting for {what} on node {node}")
        await asyncio.sleep(POLL_SECONDS)


async def take_operands_off(
    kube: KubeAdapter, node: str, operands: Sequence[str], off_value: str, progress: JsonObject,
    checkpoint: Callable[[JsonObject], Awaitable[None]],
) -> JsonObject:
    """Record each operand label's value and its pods on the node (checkpointed first), then set the labels
    that are not already `off_value` to it. Returns {label: {"previous": value or None, "pods": n}} of the
    labels this step changes; a resumed step reuses what it recorded."""
    stored = progress.get("operands")
    recorded: JsonObject | None = stored if isinstance(stored, dict) else None
    if recorded is None:
        labels = Node(await kube.get_node(node)).labels
        pods = await kube.list_pods_on_node(node)
        recorded = {}
        for operand in operands:
            label = deploy_label(operand)
            previous = labels.get(label)
            if previous is None or previous == off_value:
                continue  # not deployed by this label here, or already off: nothing to change or restore
            recorded[label] = {"previous": previous, "pods": len(operand_pods(pods, label))}
        progress["operands"] = recorded
        progress["operands_phase"] = "off"
        await checkpoint(dict(progress))
    if recorded:
        if progress.get("operands_phase") != "off":  # a step run again after they were restored: off once more
            progress["operands_phase"] = "off"
            await checkpoint(dict(progress))
        await kube.patch_node(node, {"metadata": {"labels": {label: off_value for label in recorded}}})
    return recorded


async def restore_operands(
    kube: KubeAdapter, node: str, progress: JsonObject, checkpoint: Callable[[JsonObject], Awaitable[None]], *,
    timeout: float,
) -> JsonObject:
    """Put back every recorded label value (None removes the label) and wait until each operand that had pods
    on the node has a Ready one again."""
    stored = progress.get("operands")
    recorded: JsonObject = stored if isinstance(stored, dict) else {}
    if recorded and progress.get("operands_phase") != "restored":
        labels = {k: json_value(as_mapping(v)["previous"]) for k, v in recorded.items()}
        await kube.patch_node(node, {"metadata": {"labels": labels}})
        progress["operands_phase"] = "restored"
        await checkpoint(dict(progress))
    wanted = [label for label, entry in recorded.items() if as_mapping(entry).get("pods")]
    if wanted:
        await wait_for(
            kube, node, lambda pods: all(any(_ready(p) for p in operand_pods(pods, label)) for label in wanted),
            timeout=timeout, what=f"the pods of {', '.join(wanted)} to be Ready again",
        )
    return recorded
