"""`remediator test`: playbook tests written in YAML, run plan-only against the definitions, no cluster.

A test file holds `tests:`, each with an alert (its labels, or a whole Alertmanager payload), optionally a
cluster snapshot (nodes, pods and their owners, read through a read-only stand-in for the Kubernetes
adapter by the same `gather_context` the controller uses) and fleet facts for the guardrails, and the
expectation: the rule that matches, the steps that run with their rendered parameters, the steps skipped
and the guardrail verdict. Only what the expectation names is compared; a mismatch is reported field by
field and as a unified diff of expected against actual. The format is documented in docs/playbooks.md.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from remediator.actions.base import AnyAction
from remediator.actions.context import gather_context
from remediator.adapters.kube import KubeAdapter, KubeObject
from remediator.definitions import DefinitionSet
from remediator.definitions.source import Problems, format_path, parse_yaml
from remediator.domain.guardrails import FleetState, Verdict, guardrail_facts, guardrail_verdict
from remediator.engine.decision import DecisionFacts, DecisionPolicy, Unmatched, decide_alert
from remediator.engine.planning import Proposal, target_for
from remediator.errors import DefinitionError, NotFound, NotSupported, RemediatorError
from remediator.intake.models import AlertmanagerPayload
from remediator.intake.normalize import GpuAlert, normalize
from remediator.kube.kinds import Operation
from remediator.kube.views import OwnerReference, as_list, as_mapping
from remediator.kube.vocabulary import excluded
from remediator.settings import BUNDLED_DIR, QuarantineLimit, Settings
from remediator.store.repository import utcnow
from remediator.tools.plan_only import AlertPlan, jsonable, plan_proposal, quarantines

__all__ = [
    "BUNDLED_TESTS",
    "AlertSpec",
    "CaseResult",
    "ClusterSnapshot",
    "Expectation",
    "FleetFacts",
    "GuardrailExpectation",
    "LoadedTest",
    "PlaybookTest",
    "PlaybookTestFile",
    "SnapshotKube",
    "StepExpectation",
    "SuiteReport",
    "default_test_paths",
    "load_tests",
    "render_report",
    "run_tests",
]

BUNDLED_TESTS = BUNDLED_DIR / "tests"
_SUFFIXES = (".yaml", ".yml")


# -- the file format ---------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlertSpec(_Strict):
    """One alert as Alertmanager sends it, reduced to what the controller reads."""

    labels: dict[str, str] = Field(min_length=1)
    annotations: dict[str, str] = Field(default_factory=dict)
    status: Literal["firing", "resolved"] = "firing"
    fingerprint: str = "0000000000000000"
    starts_at: str = "2026-01-01T00:00:00+00:00"

    @model_validator(mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        """Label values written as YAML numbers (`xid: 79`) are the strings Alertmanager would send."""
        if isinstance(value, dict):
            value = dict(value)
            for key in ("labels", "annotations"):
                if isinstance(value.get(key), dict):
                    value[key] = {str(k): v if isinstance(v, str) else str(v) for k, v in value[key].items()}
        return value


class ClusterSnapshot(_Strict):
    """Kubernetes objects as `kubectl get -o yaml` shows them; only the fields a test needs."""

    nodes: list[dict[str, Any]] = Field(default_factory=list)
    pods: list[dict[str, Any]] = Field(default_factory=list)
    owners: list[dict[str, Any]] = Field(
        default_factory=list, description="ReplicaSets, Deployments, Jobs, ... that pods' ownerReferences name"
    )


class FleetFacts(_Strict):
    """What the guardrails would see in the store; every field defaults to a quiet, empty fleet."""

    paused: bool = False
    quarantined_nodes: list[str] = Field(default_factory=list)
    gpu_nodes: int = Field(default=0, ge=0)
    max_quarantined_nodes: str | None = Field(default=None, description="default: the controller setting")
    recent_quarantine_starts: int = Field(default=0, ge=0)
    flapping: bool = False
    node_recent_remediations: int = Field(default=0, ge=0)
    override: bool = Field(default=False, description="a human released it past the flapping and repeat holds")
    now: datetime | None = Field(default=None, description="for maintenance windows; default: now")


class StepExpectation(_Strict):
    """A step that runs. Only the fields given are compared; `params` compares the keys it names."""

    name: str = Field(min_length=1)
    action: str | None = None
    params: dict[str, Any] | None = None
    params_exact: bool = Field(default=False, description="true: the rendered params have no other keys")
    approval: bool | None = None


def _guardrail_shorthand(value: Any) -> Any:
    if value == "allow":
        return {"allow": True}
    if value == "hold":
        return {"allow": False}
    return value


class GuardrailExpectation(_Strict):
    """`allow`, `hold`, or a mapping naming the guardrail that holds (e.g. circuit_breaker, opt_out)."""

    allow: bool | None = None
    guardrail: str | None = None
    reason_contains: str | None = None


def _step_shorthand(value: Any) -> Any:
    if isinstance(value, list):
        return [{"name": item} if isinstance(item, str) else item for item in value]
    return value


class Expectation(_Strict):
    """What should happen. Fields left out are not checked; `rule: null` means no rule matches."""

    rule: str | None = None
    playbook: str | None = None
    target: str | None = None
    steps: Annotated[list[StepExpectation] | None, BeforeValidator(_step_shorthand)] = Field(
        default=None, description="the steps that run, in order (a bare name checks only the name)"
    )
    skipped: list[str] | None = Field(default=None, description="the steps that do not run, in order")
    pods: list[str] | None = Field(
        default=None, description="`namespace/name` of the pods in the gathered context (what `object: pods` reaches)"
    )
    guardrails: Annotated[GuardrailExpectation | None, BeforeValidator(_guardrail_shorthand)] = None


class PlaybookTest(_Strict):
    """One case: an alert (or a payload), what the cluster and fleet look like, and the expectation."""

    name: str = Field(min_length=1)
    alert: AlertSpec | None = None
    payload: dict[str, Any] | None = Field(default=None, description="a whole Alertmanager webhook body")
    alert_index: int = Field(default=0, ge=0, description="which alert of `payload`")
    run_playbook: str | None = Field(
        default=None,
        description="plan this playbook directly instead of matching rules (one only an escalation or a "
        "person starts); `expect.rule` is then null",
    )
    params: dict[str, Any] = Field(default_factory=dict, description="with `run_playbook`: the rule's params")
    cluster: ClusterSnapshot | None = Field(default=None, description="default: no cluster (labels only)")
    context: dict[str, Any] = Field(default_factory=dict, description="keys set over the gathered context")
    outputs: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="earlier steps' outputs by step name, as `steps.<name>` (what they would have found)",
    )
    fleet: FleetFacts = Field(default_factory=FleetFacts)
    expect: Expectation

    @model_validator(mode="after")
    def _one_alert(self) -> PlaybookTest:
        if (self.alert is None) == (self.payload is None):
            raise ValueError("give exactly one of `alert` or `payload`")
        return self


class PlaybookTestFile(_Strict):
    """A test file: the playbook it covers (optional, for the coverage report) and its tests."""

    playbook: str | None = None
    tests: list[PlaybookTest] = Field(min_length=1)


# -- a cluster snapshot behind the adapter's read calls ----------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class SnapshotKube(KubeAdapter):
    """Answers the reads `gather_context` makes from a snapshot; every other call is refused."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:  # no API client: nothing is ever sent
        self.recorder = None
        self.snapshot = snapshot

    async def _open(self, op: Operation, **request: Any) -> Any:
        raise NotSupported(
            f"a cluster snapshot answers reads of nodes, pods and owners only, not {op.verb} {op.resource}"
        )

    async def close(self) -> None:
        return None

    async def get_node(self, name: str) -> KubeObject:
        for node in self.snapshot.nodes:
            if _meta(node).get("name") == name:
                return dict(node)
        raise NotFound(f"node {name} is not in the snapshot")

    async def list_nodes(self, label_selector: str | None = None) -> list[KubeObject]:
        return [dict(n) for n in self.snapshot.nodes]

    async def get_pod(self, namespace: str, name: str) -> KubeObject:
        for pod in self.snapshot.pods:
            meta = _meta(pod)
            if meta.get("name") == name and meta.get("namespace", "default") == namespace:
                return _with_namespace(pod)
        raise NotFound(f"pod {namespace}/{name} is not in the snapshot")

    async def list_pods_on_node(self, node: str) -> list[KubeObject]:
        return [_with_namespace(p) for p in self.snapshot.pods if (p.get("spec") or {}).get("nodeName") == node]

    async def get_owner(self, namespace: str, owner: OwnerReference | Mapping[str, object]) -> KubeObject:
        ref = owner if isinstance(owner, OwnerReference) else OwnerReference(owner)
        kind, name = ref.kind, ref.name
        if kind == "Node":
            return await self.get_node(name)
        for obj in self.snapshot.owners:
            meta = _meta(obj)
            if obj.get("kind") == kind and meta.get("name") == name and meta.get("namespace", namespace) == namespace:
                return dict(obj)
        raise NotFound(f"{kind} {namespace}/{name} is not in the snapshot")


def _with_namespace(pod: Mapping[str, Any]) -> KubeObject:
    out = dict(pod)
    meta = dict(_meta(pod))
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"{meta['namespace']}/{meta.get('name')}")
    out["metadata"] = meta
    return out


# -- loading -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedTest:
    file: str
    line: int
    test: PlaybookTest
    covers: str | None


def _test_files(paths: Iterable[Path]) -> tuple[list[Path], list[DefinitionError]]:
    files: list[Path] = []
    problems: list[DefinitionError] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _SUFFIXES))
        elif path.is_file():
            files.append(path)
        else:
            problems.append(DefinitionError(str(path), 0, "no such file or directory"))
    return files, problems


def load_tests(paths: Sequence[Path]) -> tuple[list[LoadedTest], list[DefinitionError]]:
    """Every test in the files and directories given, or the problems (file:line) that stop them loading."""
    files, errors = _test_files(paths)
    loaded: list[LoadedTest] = []
    for path in files:
        problems = Problems()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(DefinitionError(str(path), 0, f"cannot read file: {exc}"))
            continue
        doc = parse_yaml(text, str(path), problems)
        if doc is None:
            errors.extend(problems.errors)
            continue
        if not isinstance(doc.data, dict) or "tests" not in doc.data:
            errors.append(DefinitionError(str(path), 1, "not a playbook test file: expected a mapping with `tests`"))
            continue
        try:
            parsed = PlaybookTestFile.model_validate(doc.data)
        except ValidationError as exc:
            for err in exc.errors():
                where = tuple(p for p in err["loc"] if isinstance(p, str | int))
                message = str(err["msg"]).removeprefix("Value error, ")
                errors.append(DefinitionError(str(path), doc.line(where), message, format_path(where)))
            continue
        for index, test in enumerate(parsed.tests):
            loaded.append(LoadedTest(str(path), doc.line(("tests", index)), test, parsed.playbook))
    return loaded, errors


def default_test_paths(settings: Settings) -> list[Path]:
    """`<playbooks dir>/tests`; for the bundled playbooks, the bundled tests (a ConfigMap has no subdirectory)."""
    playbooks = Path(settings.playbooks_dir).resolve()
    if playbooks == (BUNDLED_DIR / "playbooks").resolve():
        return [BUNDLED_TESTS]
    return [playbooks / "tests"]


# -- running -----------------------------------------------------------------------------------------


@dataclass
class CaseResult:
    file: str
    line: int
    name: str
    differences: list[str] = field(default_factory=list)
    diff: str = ""
    actual: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.differences


@dataclass
class SuiteReport:
    definitions_version: str
    results: list[CaseResult]
    errors: list[DefinitionError]
    uncovered: list[str]

    @property
    def ok(self) -> bool:
        return not self.errors and all(r.ok for r in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {
            "definitions_version": self.definitions_version,
            "ok": self.ok,
            "passed": sum(r.ok for r in self.results),
            "failed": sum(not r.ok for r in self.results),
            "errors": [e.render() for e in self.errors],
            "playbooks_without_tests": self.uncovered,
            "results": [
                {"file": r.file, "line": r.line, "name": r.name, "ok": r.ok, "differences": r.differences,
                 "actual": r.actual}
                for r in self.results
            ],
        }


def _alert_of(test: PlaybookTest) -> AlertSpec:
    if test.alert is not None:
        return test.alert
    payload = AlertmanagerPayload.model_validate(test.payload)
    if test.alert_index >= len(payload.alerts):
        raise ValueError(f"alert_index {test.alert_index}: the payload has {len(payload.alerts)} alert(s)")
    raw = payload.alerts[test.alert_index]
    return AlertSpec(
        labels=dict(raw.labels), annotations=dict(raw.annotations), status=raw.status,
        fingerprint=raw.fingerprint or "0000000000000000", starts_at=raw.starts_at.isoformat(),
    )


def _nodes_by_ip(snapshot: ClusterSnapshot | None) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in snapshot.nodes if snapshot else []:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                found[str(address.get("address"))] = str(_meta(node).get("name"))
    return found


def _verdict(
    test: PlaybookTest,
    plan: AlertPlan,
    context: Mapping[str, Any],
    settings: Settings,
    actions: Mapping[str, AnyAction],
) -> Verdict:
    fleet = test.fleet
    limit = QuarantineLimit(fleet.max_quarantined_nodes) if fleet.max_quarantined_nodes else settings.quarantine_limit
    node_labels = (context.get("node") or {}).get("labels") or {}
    return guardrail_verdict(
        guardrail_facts(
            settings, now=fleet.now or utcnow(), node=plan.proposal.target.node,
            node_excluded=excluded(node_labels), quarantines=quarantines(plan.proposal.playbook, actions),
            fleet=FleetState(
                quarantined_nodes=frozenset(fleet.quarantined_nodes), gpu_nodes=fleet.gpu_nodes,
                recent_quarantine_starts=fleet.recent_quarantine_starts, limit_nodes=limit.resolve(fleet.gpu_nodes),
            ),
            paused=fleet.paused, flapping=fleet.flapping, node_recent_remediations=fleet.node_recent_remediations,
            override=fleet.override,
        )
    )


def _direct(test: PlaybookTest, alert: GpuAlert, defs: DefinitionSet) -> Proposal:
    playbook = defs.playbooks.get(test.run_playbook or "")
    if playbook is None:
        known = ", ".join(sorted(defs.playbooks))
        raise ValueError(f"run_playbook: no playbook {test.run_playbook!r} (known: {known})")
    return Proposal(
        rule_name="", playbook=playbook, params={**playbook.params, **test.params},
        target=target_for(playbook.target, alert), cooldown=None, require_approval=False,
    )


async def _actual(
    test: PlaybookTest, defs: DefinitionSet, settings: Settings, actions: Mapping[str, AnyAction]
) -> dict[str, Any]:
    """What the controller would do for this test's alert, as plain data."""
    spec = _alert_of(test)
    alert: GpuAlert = normalize(
        spec.labels, spec.annotations, status=spec.status, fingerprint=spec.fingerprint, kinds=defs.alert_kinds,
        node_precedence=settings.node_label_precedence, nodes_by_ip=_nodes_by_ip(test.cluster),
        starts_at=spec.starts_at,
    )
    if spec.status == "resolved":
        return {"rule": None, "note": "a resolved alert starts nothing"}
    kube = SnapshotKube(test.cluster) if test.cluster is not None else None
    if test.run_playbook:
        proposal = _direct(test, alert, defs)
    else:  # the controller's own decision, over an empty history (no earlier alerts or remediations)
        decision = decide_alert(alert, defs, DecisionPolicy.of(settings), DecisionFacts(now=utcnow()))
        if isinstance(decision, Unmatched):
            return {"rule": None}
        proposal = decision.proposal
    context = await gather_context(kube, proposal.target, spec.labels, settings)
    context.update(test.context)
    plan = plan_proposal(proposal, alert, defs, context, test.outputs)
    verdict = _verdict(test, plan, context, settings, actions)
    return {
        "rule": proposal.rule_name or None,
        "playbook": proposal.playbook.name,
        "target": proposal.target.key,
        "steps": [
            {"name": s.name, "action": s.action, "params": jsonable(s.params), "approval": s.approval}
            for s in plan.steps if s.runs
        ],
        "skipped": [{"name": s.name, "note": s.note} for s in plan.steps if not s.runs],
        "pods": [f"{as_mapping(p).get('namespace')}/{as_mapping(p).get('name')}" for p in as_list(context.get("pods"))],
        "guardrails": {"allow": verdict.allow, "guardrail": verdict.name, "reason": verdict.reason},
    }


def _compare(expect: Expectation, actual: dict[str, Any]) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """Differences as readable lines, plus the expected and actual views (only what the test names)."""
    given = expect.model_fields_set
    diffs: list[str] = []
    want: dict[str, Any] = {}
    got: dict[str, Any] = {}
    for key in ("rule", "playbook", "target"):
        if key in given:
            want[key], got[key] = getattr(expect, key), actual.get(key)
            if want[key] != got[key]:
                diffs.append(f"{key}: expected {want[key]!r}, got {got[key]!r}")
    if expect.steps is not None:
        want["steps"], got["steps"] = _compare_steps(expect.steps, actual.get("steps") or [], diffs)
        for skipped in actual.get("skipped") or []:
            failed = skipped["note"] and not skipped["note"].startswith("skipped: when")
            if failed and skipped["name"] not in (expect.skipped or []):
                diffs.append(f"step {skipped['name']}: {skipped['note']} (give `outputs`, or list it in `skipped`)")
    if expect.skipped is not None:
        want["skipped"] = list(expect.skipped)
        got["skipped"] = [s["name"] for s in actual.get("skipped") or []]
        if want["skipped"] != got["skipped"]:
            diffs.append(f"skipped: expected {want['skipped']}, got {got['skipped']}")
    if expect.pods is not None:
        want["pods"], got["pods"] = list(expect.pods), list(actual.get("pods") or [])
        if want["pods"] != got["pods"]:
            diffs.append(f"pods: expected {want['pods']}, got {got['pods']}")
    if expect.guardrails is not None:
        want["guardrails"], got["guardrails"] = _compare_guardrails(expect.guardrails, actual, diffs)
    return diffs, want, got


# A step's fields compared as single values, and how a difference shows each (the action's name quoted).
_SCALAR_STEP_FIELDS: tuple[tuple[str, Callable[[Any], str]], ...] = (("action", repr), ("approval", str))


def _compare_steps(
    expected: list[StepExpectation], actual: list[dict[str, Any]], diffs: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    want_names = [s.name for s in expected]
    got_names = [s["name"] for s in actual]
    if want_names != got_names:
        diffs.append(f"steps that run: expected {want_names}, got {got_names}")
    want: list[dict[str, Any]] = []
    got: list[dict[str, Any]] = []
    by_name = {s["name"]: s for s in actual}
    for index, exp in enumerate(expected):
        w: dict[str, Any] = {"name": exp.name}
        act = by_name.get(exp.name)
        g: dict[str, Any] = {"name": exp.name} if act is not None else {"name": f"{exp.name} (does not run)"}
        for name, shown in _SCALAR_STEP_FIELDS:
            expected_value = getattr(exp, name)
            if expected_value is None:
                continue
            w[name] = expected_value
            if act is not None:
                g[name] = act[name]
                if act[name] != expected_value:
                    diffs.append(f"steps[{index}] {exp.name}: {name}: expected {shown(expected_value)}, "
                                 f"got {shown(act[name])}")
        if exp.params is not None:
            wanted = jsonable(exp.params)
            w["params"] = wanted
            if act is not None:
                rendered = act["params"]
                keys = list(rendered) if exp.params_exact else list(wanted)
                g["params"] = {k: rendered[k] for k in keys if k in rendered}
                for key in wanted:
                    if key not in rendered:
                        diffs.append(f"steps[{index}] {exp.name}: params.{key}: expected {wanted[key]!r}, missing")
                    elif rendered[key] != wanted[key]:
                        diffs.append(
                            f"steps[{index}] {exp.name}: params.{key}: expected {wanted[key]!r}, got {rendered[key]!r}"
                        )
                if exp.params_exact:
                    for key in rendered:
                        if key not in wanted:
                            diffs.append(
                                f"steps[{index}] {exp.name}: params.{key}: not expected, got {rendered[key]!r}"
                            )
        want.append(w)
        got.append(g)
    for act in actual:
        if act["name"] not in want_names:
            got.append({"name": act["name"], "action": act["action"], "params": act["params"]})
    return want, got


def _compare_guardrails(
    expect: GuardrailExpectation, actual: dict[str, Any], diffs: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    verdict = actual.get("guardrails")
    if verdict is None:
        diffs.append("guardrails: expected a verdict, but no rule matched")
        return expect.model_dump(exclude_none=True), {}
    want: dict[str, Any] = {}
    got: dict[str, Any] = {}
    if expect.allow is not None:
        want["allow"], got["allow"] = expect.allow, verdict["allow"]
        if expect.allow != verdict["allow"]:
            diffs.append(
                f"guardrails: expected {'allow' if expect.allow else 'hold'}, got "
                f"{'allow' if verdict['allow'] else 'hold'} ({verdict['reason']})"
            )
    if expect.guardrail is not None:
        want["guardrail"], got["guardrail"] = expect.guardrail, verdict["guardrail"]
        if expect.guardrail != verdict["guardrail"]:
            diffs.append(f"guardrails: expected guardrail {expect.guardrail!r}, got {verdict['guardrail']!r}")
    if expect.reason_contains is not None:
        want["reason"], got["reason"] = f"...{expect.reason_contains}...", verdict["reason"]
        if expect.reason_contains not in verdict["reason"]:
            diffs.append(f"guardrails: reason {verdict['reason']!r} does not contain {expect.reason_contains!r}")
    return want, got


def _unified(want: dict[str, Any], got: dict[str, Any]) -> str:
    def dump(value: dict[str, Any]) -> list[str]:
        return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, width=1000).splitlines()

    return "\n".join(difflib.unified_diff(dump(want), dump(got), "expected", "actual", lineterm=""))


async def _run_one(
    loaded: LoadedTest, defs: DefinitionSet, settings: Settings, actions: Mapping[str, AnyAction]
) -> CaseResult:
    result = CaseResult(loaded.file, loaded.line, loaded.test.name)
    try:
        actual = await _actual(loaded.test, defs, settings, actions)
    except (ValueError, ValidationError, RemediatorError) as exc:
        result.differences.append(f"cannot run: {exc}")
        return result
    result.actual = actual
    diffs, want, got = _compare(loaded.test.expect, actual)
    result.differences = diffs
    if diffs:
        result.diff = _unified(want, got)
    return result


def run_tests(
    paths: Sequence[Path], defs: DefinitionSet, settings: Settings, actions: Mapping[str, AnyAction]
) -> SuiteReport:
    """Run every test found under `paths` against `defs`."""
    loaded, errors = load_tests(paths)

    async def run_all() -> list[CaseResult]:
        return [await _run_one(item, defs, settings, actions) for item in loaded]

    results = asyncio.run(run_all())
    covered = {item.covers for item in loaded} | {
        str(r.actual.get("playbook")) for r in results if r.actual.get("playbook")
    }
    uncovered = sorted(name for name in defs.playbooks if name not in covered)
    if not loaded and not errors:
        errors.append(DefinitionError(", ".join(str(p) for p in paths), 0, "no playbook tests found"))
    return SuiteReport(defs.version, results, errors, uncovered)


def render_report(report: SuiteReport, *, verbose: bool = False) -> str:
    lines: list[str] = []
    for error in report.errors:
        lines.append(f"ERROR {error.render()}")
    for result in report.results:
        if result.ok:
            if verbose:
                lines.append(f"PASS  {result.file}:{result.line}: {result.name}")
            continue
        lines.append(f"FAIL  {result.file}:{result.line}: {result.name}")
        lines.extend(f"      {d}" for d in result.differences)
        if result.diff:
            lines.extend(f"      {line}" for line in result.diff.splitlines())
    passed = sum(r.ok for r in report.results)
    failed = len(report.results) - passed
    summary = f"{passed} passed, {failed} failed"
    if report.errors:
        summary += f", {len(report.errors)} file error(s)"
    lines.append(f"{summary} (definitions version {report.definitions_version})")
    if report.uncovered:
        lines.append(f"playbooks without tests: {', '.join(report.uncovered)}")
    return "\n".join(lines)
