"""The shared-cause statistics (domain/storms.py): an exact hypergeometric tail, a label every node carries is
never a cause, a 14-of-15 label against a 22% fleet share is, labels unique per node are not tested, and the fleet
counts follow node changes incrementally."""

from __future__ import annotations

import math
from typing import Any

import pytest

from remediator.domain.storms import Fault, FleetCounts, StormPolicy, analyse, fleet_of, hypergeom_sf, node_attributes

DRIVER = "nvidia.com/cuda.driver-version.full"


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "serial": f"s-{name}",
                                                  "nvidia.com/gpu.product": "H100", **labels},
                         "creationTimestamp": "2026-01-01T03:04:05Z"},
            "status": {"nodeInfo": {"kubeletVersion": "v1.31.2", "kernelVersion": "6.8.0"}}}


def brute_sf(x: int, n_pop: int, k: int, n: int) -> float:
    total = math.comb(n_pop, n)
    return sum(math.comb(k, i) * math.comb(n_pop - k, n - i) for i in range(x, min(k, n) + 1)) / total


@pytest.mark.parametrize(("x", "n_pop", "k", "n"), [(3, 20, 5, 6), (0, 10, 4, 3), (5, 50, 5, 10), (14, 100, 22, 15),
                                                    (1, 30, 30, 4), (2, 8, 7, 3)])
def test_the_tail_is_exact(x: int, n_pop: int, k: int, n: int) -> None:
    assert hypergeom_sf(x, n_pop, k, n) == pytest.approx(brute_sf(x, n_pop, k, n), rel=1e-9, abs=1e-300)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="bad hypergeometric"):
        hypergeom_sf(1, 10, 11, 3)


def fleet_with_rollout() -> tuple[FleetCounts, list[str]]:
    """100 nodes; 22 run the new driver; every node carries the same GPU product, zone labels vary."""
    nodes = [node(f"n{i:03}", **{DRIVER: "580.95.05" if i < 22 else "570.86.15", "zone": f"z{i % 4}"})
             for i in range(100)]
    return fleet_of(nodes), [f"n{i:03}" for i in range(100)]


def test_a_14_of_15_label_is_the_cause_and_a_fleet_wide_label_never_is() -> None:
    fleet, names = fleet_with_rollout()
    faulting = [*names[:14], names[50]]  # 14 on the new driver, one elsewhere
    analysis = analyse([Fault(n, frozenset({("fault:alertname", "GpuXid")})) for n in faulting], fleet, StormPolicy())
    assert analysis is not None and analysis.cause is not None
    cause = analysis.cause
    assert (cause.key, cause.value, cause.faulting, cause.faulting_total, cause.fleet) == (
        f"label:{DRIVER}", "580.95.05", 14, 15, 22)
    assert cause.text().startswith(f"14 of 15 faulting nodes carry label {DRIVER}=580.95.05; 22% of the fleet does")
    assert cause.p_value is not None and cause.p_value < 1e-6
    product = next(c for c in analysis.candidates if c.key == "label:nvidia.com/gpu.product")
    assert product.faulting == 15 and product.p_value == 1.0  # the whole fleet has it: never a cause
    # the hostname and a per-node serial are never tested; the alert name is described, not tested
    assert not any(c.key in ("label:kubernetes.io/hostname", "label:serial") for c in analysis.candidates)
    alert = next(c for c in analysis.candidates if c.key == "fault:alertname")
    assert alert.p_value is None and alert.faulting == 15 and "fleet share unknown" in alert.text()


def test_the_fleet_wide_label_alone_does_not_hold_even_when_every_fault_carries_it() -> None:
    nodes = [node(f"m{i}") for i in range(40)]
    analysis = analyse([Fault(f"m{i}") for i in range(20)], fleet_of(nodes), StormPolicy())
    assert analysis is not None and analysis.cause is None
    assert all(c.p_value == 1.0 for c in analysis.candidates if c.p_value is not None)


def test_too_few_nodes_is_no_storm_and_a_weak_share_holds_nothing() -> None:
    fleet, names = fleet_with_rollout()
    assert analyse([Fault(n) for n in names[:3]], fleet, StormPolicy()) is None  # 3 is not more than 3
    spread = [names[0], names[30], names[40], names[60], names[80]]  # one on the new driver: no shared cause
    analysis = analyse([Fault(n) for n in spread], fleet, StormPolicy())
    assert analysis is not None and analysis.cause is None


def test_fewer_than_k_explained_nodes_do_not_hold() -> None:
    fleet, names = fleet_with_rollout()
    analysis = analyse([Fault(n) for n in [*names[:4], names[60]]], fleet, StormPolicy(hold_nodes=5))
    assert analysis is not None and analysis.cause is None
    assert analysis.candidates[0].value == "580.95.05"  # still named first, with its counts


def test_fleet_counts_follow_changes() -> None:
    fleet = fleet_of([node("a", zone="z1"), node("b", zone="z1"), node("c", zone="z2")])
    assert fleet.counts[("label:zone", "z1")] == 2 and fleet.unique_per_node("label:serial")
    fleet.set("a", node_attributes(node("a", zone="z2")))
    assert fleet.counts[("label:zone", "z1")] == 1 and fleet.counts[("label:zone", "z2")] == 2
    fleet.set("b", None)
    assert ("label:zone", "z1") not in fleet.counts and fleet.size == 2
    assert not fleet.unique_per_node("label:zone")
    fleet.replace({"c": node_attributes(node("c", zone="z2"))})
    assert fleet.size == 1 and fleet.counts[("label:zone", "z2")] == 1


def test_node_info_and_creation_bucket_are_attributes() -> None:
    attrs = node_attributes(node("x"))
    assert ("node:kubelet", "v1.31.2") in attrs and ("node:kernel", "6.8.0") in attrs
    assert ("node:created", "2026-01-01T00:00:00+00:00") in attrs
    assert not any(k == "label:kubernetes.io/hostname" for k, _ in attrs)
