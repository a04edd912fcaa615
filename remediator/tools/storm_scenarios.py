"""`remediator simulate --scenario FILE --seeds N`: the storm analysis on a simulated fleet.

A scenario file describes a fleet (size, labels and how their values are spread), the background fault rate, and
optionally a rollout: a label value given to a fraction of the nodes at some time, after which those nodes fault at
a multiple of the base rate. Each seed draws the fleet and the fault times, then replays the faults in order and,
at each one (as the controller does at each admission), analyses the faults of the window with the same code and
the same thresholds as the guardrail; a named cause opens a storm and every later fault on a node sharing it is
held, as engine/storm_guard.py holds it. The report says, over the seeds: how often a cause was named and which,
the detection delay after the rollout began, the precision of the holds (held faults on rolled-out nodes / held
faults), the share of the rollout's faults held, and how many background faults outside the cause went on.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

import yaml

from remediator.domain.durations import parse_duration
from remediator.domain.json_values import JsonObject
from remediator.domain.storms import Fault, FleetCounts, StormPolicy, analyse, node_attributes
from remediator.errors import ScenarioError

__all__ = ["Scenario", "load_scenario", "render_scenarios", "run_scenario"]


@dataclass(frozen=True)
class Rollout:
    label: str
    value: str
    fraction: float
    at_s: float
    rate_multiplier: float


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int
    duration_s: float
    window_s: float
    base_rate_per_node_hour: float
    labels: Mapping[str, object]  # label -> a fixed value, or {values: [...]} drawn uniformly, or {count: N} values
    rollout: Rollout | None = None
    policy: StormPolicy = field(default_factory=StormPolicy)
    alerts: tuple[str, ...] = ("GPUXidError",)


class SeedCause(TypedDict):
    """The cause a seed's run named first, and when (seconds into the run)."""

    key: str
    value: str
    text: str
    at_s: float


class SeedRun(TypedDict):
    """One seed's draw of the fleet and the faults, and what the analysis did with it."""

    seed: int
    faults: int
    evaluations: int
    cause: SeedCause | None
    detection_delay_s: float | None
    held: int
    held_on_rollout: int
    rollout_faults_after_rollout: int
    outside_went_on: int


class DelaySpread(TypedDict):
    median: float
    min: float
    max: float


class ScenarioSummary(TypedDict):
    """The figures over every seed: a false-positive rate without a rollout, detection figures with one."""

    seeds: int
    named: int
    named_rate: float
    false_positive_rate: NotRequired[float]
    named_rollout_first: NotRequired[int]
    named_rollout_first_rate: NotRequired[float]
    detection_delay_s: NotRequired[DelaySpread | None]
    hold_precision: NotRequired[float | None]
    rollout_faults_held: NotRequired[float]
    outside_went_on: NotRequired[int]


class ScenarioReport(TypedDict):
    scenario: str
    nodes: int
    policy: dict[str, object]  # the thresholds (domain/storms.py: StormPolicy)
    summary: ScenarioSummary
    runs: list[SeedRun]


def _number(raw: Mapping[str, object], key: str, default: float | None = None, *, low: float = 0.0) -> float:
    value = raw.get(key, default)
    if value is None or isinstance(value, bool) or not isinstance(value, int | float) or value < low:
        raise ScenarioError(f"{key}: a number >= {low} is required, got {value!r}")
    return float(value)


def _duration(raw: Mapping[str, object], key: str, default: str) -> float:
    try:
        return parse_duration(str(raw.get(key, default))).total_seconds()
    except (ValueError, TypeError) as exc:
        raise ScenarioError(f"{key}: {exc}") from None


def load_scenario(path: Path) -> Scenario:
    """Read and check a scenario file (YAML)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"not YAML: {exc}") from None
    if not isinstance(raw, Mapping):
        raise ScenarioError("a scenario is a mapping (name, nodes, duration, base_rate_per_node_hour, ...)")
    unknown = set(raw) - {"name", "nodes", "duration", "window", "base_rate_per_node_hour", "labels", "rollout",
                          "thresholds", "alerts"}
    if unknown:
        raise ScenarioError(f"unknown field(s): {', '.join(sorted(unknown))}")
    labels = raw.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise ScenarioError("labels: a mapping of label -> value, {values: [...]} or {count: N}")
    rollout = None
    if raw.get("rollout") is not None:
        r = raw["rollout"]
        if not isinstance(r, Mapping) or not r.get("label") or not r.get("value"):
            raise ScenarioError("rollout: needs label, value, fraction, at and rate_multiplier")
        fraction = _number(r, "fraction")
        if fraction > 1:
            raise ScenarioError("rollout.fraction: at most 1")
        rollout = Rollout(str(r["label"]), str(r["value"]), fraction, _duration(r, "at", "0s"),
                          _number(r, "rate_multiplier", 1.0))
    thresholds = raw.get("thresholds") or {}
    policy = StormPolicy(min_nodes=int(thresholds.get("min_nodes", 3)), hold_nodes=int(thresholds.get("hold_nodes", 5)),
                         p_value=float(thresholds.get("p_value", 1e-6)))
    nodes = int(_number(raw, "nodes", low=1))
    return Scenario(
        name=str(raw.get("name") or path.stem), nodes=nodes, duration_s=_duration(raw, "duration", "2h"),
        window_s=_duration(raw, "window", "15m"), base_rate_per_node_hour=_number(raw, "base_rate_per_node_hour"),
        labels=dict(labels), rollout=rollout, policy=policy,
        alerts=tuple(str(a) for a in raw.get("alerts") or ("GPUXidError",)),
    )


def _label_value(rng: random.Random, spec: object, index: int) -> str:
    if isinstance(spec, Mapping) and "values" in spec:
        return str(rng.choice(list(spec["values"])))
    if isinstance(spec, Mapping) and "count" in spec:
        return f"{spec.get('prefix', 'v')}{rng.randrange(int(spec['count']))}"
    return str(spec)


def _node(name: str, labels: dict[str, str]) -> JsonObject:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}}


def run_seed(scenario: Scenario, seed: int) -> SeedRun:
    """One draw of the fleet and the faults, replayed in order through the analysis."""
    rng = random.Random(seed)  # noqa: S311 -- a reproducible simulation, not a secret
    names = [f"node-{i:05}" for i in range(scenario.nodes)]
    labels = {n: {k: _label_value(rng, spec, i) for k, spec in scenario.labels.items()} for i, n in enumerate(names)}
    rollout = scenario.rollout
    rolled: set[str] = set()
    if rollout is not None:
        rolled = set(rng.sample(names, round(rollout.fraction * scenario.nodes)))
    fleet = FleetCounts()
    for name in names:
        fleet.set(name, node_attributes(_node(name, labels[name])))
    base = scenario.base_rate_per_node_hour / 3600.0
    events: list[tuple[float, str, str]] = []
    for name in names:
        t = 0.0
        while True:
            rate = base
            if name in rolled and rollout is not None and t >= rollout.at_s:
                rate = base * rollout.rate_multiplier
            step = rng.expovariate(rate) if rate > 0 else float("inf")
            if name in rolled and rollout is not None and t < rollout.at_s <= t + step:
                t = rollout.at_s  # memoryless: the faster rate starts at the rollout
                continue
            t += step
            if t >= scenario.duration_s:
                break
            events.append((t, name, rng.choice(scenario.alerts)))
    events.sort()
    changed_at = rollout.at_s if rollout is not None else None
    storm: tuple[str, str, float, str] | None = None  # key, value, when, text
    held = held_rolled = outside_went_on = rolled_after = 0
    window: list[tuple[float, str, str]] = []
    evaluations = 0
    applied = False
    for t, name, alert in events:
        if not applied and changed_at is not None and t >= changed_at and rollout is not None:
            applied = True  # the node watch sees every rolled-out node's new label at once
            for node in rolled:
                fleet.set(node, node_attributes(_node(node, {**labels[node], rollout.label: rollout.value})))
        window = [e for e in window if e[0] > t - scenario.window_s]
        window.append((t, name, alert))
        if storm is None:
            evaluations += 1
            analysis = analyse([Fault(n, frozenset({("fault:alertname", a)})) for _, n, a in window], fleet,
                               scenario.policy)
            if analysis is not None and analysis.cause is not None:
                c = analysis.cause
                storm = (c.key, c.value, t, c.text())
        attrs = fleet.attributes(name) or frozenset()
        if name in rolled and changed_at is not None and t >= changed_at:
            rolled_after += 1
        if storm is not None and (storm[0], storm[1]) in attrs:
            held += 1
            held_rolled += name in rolled
        elif storm is not None:
            outside_went_on += 1
    return {
        "seed": seed, "faults": len(events), "evaluations": evaluations,
        "cause": None if storm is None else {"key": storm[0], "value": storm[1], "text": storm[3],
                                             "at_s": round(storm[2], 1)},
        "detection_delay_s": None if storm is None or changed_at is None else round(storm[2] - changed_at, 1),
        "held": held, "held_on_rollout": held_rolled, "rollout_faults_after_rollout": rolled_after,
        "outside_went_on": outside_went_on,
    }


def run_scenario(scenario: Scenario, seeds: int, first_seed: int = 1) -> ScenarioReport:
    """Every seed's run and the figures over them."""
    if seeds < 1:
        raise ScenarioError("seeds: at least 1")
    runs = [run_seed(scenario, first_seed + i) for i in range(seeds)]
    named = [r for r in runs if r["cause"] is not None]
    rollout = scenario.rollout
    summary: ScenarioSummary = {"seeds": seeds, "named": len(named), "named_rate": len(named) / seeds}
    if rollout is None:
        summary["false_positive_rate"] = len(named) / seeds
    else:
        right = [r for r in named if (cause := r["cause"]) is not None
                 and cause["key"] == f"label:{rollout.label}" and cause["value"] == rollout.value]
        delays = [delay for r in right if (delay := r["detection_delay_s"]) is not None]
        held = sum(r["held"] for r in named)
        summary["named_rollout_first"] = len(right)
        summary["named_rollout_first_rate"] = len(right) / seeds
        summary["detection_delay_s"] = (
            {"median": statistics.median(delays), "min": min(delays), "max": max(delays)} if delays else None
        )
        summary["hold_precision"] = sum(r["held_on_rollout"] for r in named) / held if held else None
        summary["rollout_faults_held"] = sum(r["held_on_rollout"] for r in right) / max(1, sum(
            r["rollout_faults_after_rollout"] for r in right))
        summary["outside_went_on"] = sum(r["outside_went_on"] for r in named)
    return {"scenario": scenario.name, "nodes": scenario.nodes, "policy": dict(vars(scenario.policy)),
            "summary": summary, "runs": runs}


def render_scenarios(report: ScenarioReport) -> str:
    s = report["summary"]
    lines = [f"scenario {report['scenario']}: {report['nodes']} nodes, {s['seeds']} seed(s); thresholds "
             f"{report['policy']}", f"a cause named in {s['named']} of {s['seeds']} seeds"]
    if "false_positive_rate" in s:
        lines.append(f"false-positive rate: {s['false_positive_rate']:.3f}")
    else:
        delay = s["detection_delay_s"]
        lines.append(f"the rollout named first in {s['named_rollout_first']} of {s['seeds']} seeds")
        if delay:
            lines.append(f"detection delay after the rollout: median {delay['median']:.0f} s "
                         f"(min {delay['min']:.0f}, max {delay['max']:.0f})")
        if s["hold_precision"] is not None:
            lines.append(f"hold precision: {s['hold_precision']:.3f}; rollout faults held after detection: "
                         f"{s['rollout_faults_held']:.3f}; faults outside the cause that went on: "
                         f"{s['outside_went_on']}")
    for run in report["runs"][:5]:
        cause = run["cause"]["text"] if run["cause"] else "nothing named"
        lines.append(f"  seed {run['seed']}: {run['faults']} faults; {cause}")
    return "\n".join(lines)
