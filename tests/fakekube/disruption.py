"""PodDisruptionBudget arithmetic as the disruption controller and the eviction subresource do it.

desiredHealthy comes from minAvailable or maxUnavailable (percentages rounded up) against the expected
pod count, which is the sum of the replicas of the pods' controllers (an integer minAvailable needs no
expected count); currentHealthy counts selected pods that are Running, Ready and not terminating.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.fakekube.selectors import label_selector_from_object

__all__ = ["Budget", "compute_budget", "is_healthy", "pdb_selects"]


def pdb_selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    if pdb["metadata"].get("namespace") != pod["metadata"].get("namespace"):
        return False
    requirements = label_selector_from_object(pdb.get("spec", {}).get("selector"))
    if requirements is None:
        return False
    labels = pod["metadata"].get("labels") or {}
    return all(r.matches(labels) for r in requirements)


def is_healthy(pod: Mapping[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _scaled(value: Any, expected: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(expected * int(value[:-1]) / 100)
    return int(value)


@dataclass(frozen=True)
class Budget:
    desired_healthy: int
    current_healthy: int
    expected: int
    error: str | None = None

    @property
    def disruptions_allowed(self) -> int:
        if self.error:
            return 0
        return max(0, self.current_healthy - self.desired_healthy)


def compute_budget(
    pdb: Mapping[str, Any],
    pods: list[dict[str, Any]],
    controller_replicas: Callable[[Mapping[str, Any]], int | None],
) -> Budget:
    """`controller_replicas(pod)`: replicas of the pod's scalable controller, None if it has none."""
    selected = [p for p in pods if pdb_selects(pdb, p)]
    healthy = sum(1 for p in selected if is_healthy(p))
    spec = pdb.get("spec") or {}
    min_available = spec.get("minAvailable")
    if isinstance(min_available, int):
        return Budget(min_available, healthy, len(selected))
    expected, error = _expected_count(selected, controller_replicas)
    if min_available is not None:
        return Budget(_scaled(min_available, expected), healthy, expected, error)
    max_unavailable = spec.get("maxUnavailable")
    if max_unavailable is None:
        return Budget(0, healthy, expected, error)
    return Budget(max(0, expected - _scaled(max_unavailable, expected)), healthy, expected, error)


def _expected_count(
    selected: list[dict[str, Any]], controller_replicas: Callable[[Mapping[str, Any]], int | None]
) -> tuple[int, str | None]:
    seen: dict[str, int] = {}
    for pod in selected:
        owner = next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
        replicas = controller_replicas(pod)
        if owner is None or replicas is None:
            return 0, f"pod {pod['metadata']['name']} has no scalable controller"
        seen[owner["uid"]] = replicas
    return sum(seen.values()), None
