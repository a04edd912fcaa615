"""The step lifecycle's stages, one typed value each: a step runs, is skipped (`when` false), waits for an
approval, or fails at a named stage (render, parse, begin); every recorded end goes through one `record`.

And one builder of a stored remediation's template variables: the approval page's preview and `replay` show
the same `escalation.history` of an `rma-gpu` remediation as the executor renders into its `rma` step."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any, cast
from unittest.mock import MagicMock

import pytest
from pydantic import BaseModel

from remediator.actions.registry import default_registry
from remediator.definitions import DefinitionSet, Step, load_definitions
from remediator.definitions.loader import BUNDLED_PLAYBOOKS, BUNDLED_RULES
from remediator.engine.approvals import Approvals
from remediator.engine.decision import ladder_proposal
from remediator.engine.ladder import remediation_plan
from remediator.engine.planning import Proposal, stored_variables
from remediator.engine.return_to_service import RevertStep
from remediator.engine.runtime import Runtime
from remediator.engine.step_lifecycle import StepLifecycle
from remediator.engine.step_stages import Failed, NeedsApproval, Ready, Skipped, Stage, prepare
from remediator.intake.normalize import GpuAlert
from remediator.settings import Settings
from remediator.store.models import Remediation, StepRow
from remediator.tools.replay import _actual_steps

ACTIONS = default_registry()
UUID = "GPU-12345678-1234-1234-1234-123456789abc"
KNOWN_ACTIONS: dict[str, type[BaseModel]] = {name: a.Params for name, a in ACTIONS.items()}
VARIABLES: dict[str, Any] = {"params": {"reason": "xid-79", "on": True}, "steps": {}}

ALERT = GpuAlert(
    alertname="GpuXidError", status="firing", fingerprint="fp-1", kind="xid", node="node-1", node_source="node",
    gpu_uuid=UUID, gpu_index="0", model="H100", xid=79, starts_at="2026-01-02T03:04:05Z",
    labels={"alertname": "GpuXidError", "xid": "79"}, annotations={"summary": "fell off the bus"},
)
HISTORY = [{"at": "2026-01-01T00:00:00+00:00", "xid": 79, "gpu": UUID, "playbook": "reset-gpu"},
           {"at": "2026-01-01T06:00:00+00:00", "xid": 79, "gpu": UUID, "playbook": "reboot-node"}]
ESCALATION = {"from": "rem-0", "reason": "gate_failed", "rung": 2, "ladder": ["reset-gpu", "reboot-node", "rma-gpu"],
              "history": HISTORY, "gate": {"verdict": "fail"}}


def taint(**extra: Any) -> Step:
    return Step.model_validate({"name": "taint", "action": "taint", "params": {"value": "{{ params.reason }}"},
                                **extra})


# -- the pure stages ----------------------------------------------------------------------------------


def test_a_step_that_applies_and_parses_is_ready_with_its_rendered_and_parsed_params() -> None:
    ready = prepare(taint(when="params.on"), ACTIONS["taint"], VARIABLES)

    assert isinstance(ready, Ready)
    assert ready.rendered == {"value": "xid-79"}
    assert ready.params.value == "xid-79"


def test_a_step_whose_when_is_false_is_skipped_with_why() -> None:
    assert prepare(taint(when="!params.on"), ACTIONS["taint"], VARIABLES) == Skipped("when: !params.on is false")


def test_a_step_that_waits_for_a_person_needs_approval_before_it_renders() -> None:
    broken = Step.model_validate({"name": "taint", "action": "taint", "params": {"value": "{{ nope.x }}"}})

    assert prepare(broken, ACTIONS["taint"], VARIABLES, needs_approval=True) == NeedsApproval()


def test_a_template_error_fails_the_step_at_render() -> None:
    broken = Step.model_validate({"name": "taint", "action": "taint", "params": {"value": "{{ nope.x }}"}})

    failed = prepare(broken, ACTIONS["taint"], VARIABLES)

    assert isinstance(failed, Failed)
    assert failed.stage is Stage.RENDER
    assert failed.error.startswith("template error: ")
    assert failed.rendered == {}


def test_parameters_the_action_refuses_fail_the_step_at_parse_with_what_was_rendered() -> None:
    wrong = Step.model_validate({"name": "taint", "action": "taint",
                                 "params": {"value": "{{ params.reason }}", "effect": "Sometimes"}})

    failed = prepare(wrong, ACTIONS["taint"], VARIABLES)

    assert isinstance(failed, Failed)
    assert failed.stage is Stage.PARSE
    assert failed.error.startswith("parameters error: ValidationError")
    assert failed.rendered == {"value": "xid-79", "effect": "Sometimes"}


def test_an_unknown_action_fails_the_step_at_parse() -> None:
    step = Step.model_validate({"name": "x", "action": "no-such-action"})

    failed = prepare(step, None, VARIABLES)

    assert isinstance(failed, Failed)
    assert (failed.stage, failed.error) == (Stage.PARSE, "parameters error: LookupError: unknown action "
                                                         "'no-such-action'")


# -- the live lifecycle: begin, run, record -----------------------------------------------------------


class Repo:
    """The store calls of one step, recorded."""

    def __init__(self, *, begin_fails: bool = False) -> None:
        self.begin_fails = begin_fails
        self.finished: list[dict[str, Any]] = []
        self.begun: list[dict[str, Any]] = []

    async def steps(self, rem_id: str) -> list[StepRow]:
        return []

    async def current_approval(self, rem_id: str) -> None:
        return None

    async def begin_step(self, rem_id: str, owner: str, **kwargs: Any) -> StepRow:
        if self.begin_fails:
            raise RuntimeError("the row could not be written")
        self.begun.append(kwargs)
        return StepRow(progress={})

    async def finish_step(self, rem_id: str, owner: str, **kwargs: Any) -> None:
        self.finished.append(kwargs)


def lifecycle(repo: Repo, *, plan_only: bool = True) -> StepLifecycle:
    rt = SimpleNamespace(actions=ACTIONS, repo=repo, owner="w", settings=Settings(), kube=None, sidecar=None,
                         notifier=None, plan_only=plan_only, metrics=MagicMock())
    return StepLifecycle(cast(Runtime, rt))


def remediation(plan: dict[str, Any] | None = None, **extra: Any) -> Remediation:
    return Remediation(
        id="rem-1", plan=plan or {"alert": ALERT.as_json()}, target_kind="gpu", target_key=f"gpu:node-1/{UUID}",
        node="node-1", gpu_uuid=UUID, gpu_index="0", namespace=None, pod=None, params={"reason": "xid-79"},
        context={}, alert_labels=dict(ALERT.labels), alert_annotations=dict(ALERT.annotations), alertname="x",
        alert_fingerprint="fp-1", current_step=0, **{"playbook": "p", **extra},
    )


async def test_a_step_that_runs_is_begun_run_and_recorded_once() -> None:
    repo = Repo()

    outcome = await lifecycle(repo).attempt(remediation(), taint(), 0, phase="forward", name="taint", rows=[])

    assert (outcome.status, outcome.failed) == ("planned", False)
    assert repo.begun[0]["params"] == {"value": "xid-79"}
    assert [(f["status"], f["advance"]) for f in repo.finished] == [("planned", True)]
    assert repo.finished[0]["output"]["message"].startswith("plan-only: ")


async def test_a_skipped_step_is_recorded_skipped_and_never_begun() -> None:
    repo = Repo()

    outcome = await lifecycle(repo).attempt(remediation(), taint(when="false"), 0, phase="forward", name="taint",
                                            rows=[])

    assert outcome.status == "skipped"
    assert repo.begun == []
    assert [(f["status"], f["output"]) for f in repo.finished] == [("skipped", {"reason": "when: false is false"})]


async def test_a_step_that_cannot_begin_fails_at_begin_unrecorded() -> None:
    repo = Repo(begin_fails=True)

    outcome = await lifecycle(repo, plan_only=False).attempt(remediation(), taint(), 0, phase="forward",
                                                             name="taint", rows=[])

    assert outcome.failed
    assert outcome.stage is Stage.BEGIN
    assert outcome.error == "action error: RuntimeError: the row could not be written"
    assert outcome.rendered == {"value": "xid-79"}
    assert repo.finished == []  # its caller decides what the failure does, and records it


async def test_a_template_error_reaches_the_caller_as_a_failure_at_render() -> None:
    repo = Repo()
    broken = Step.model_validate({"name": "taint", "action": "taint", "params": {"value": "{{ nope.x }}"}})

    outcome = await lifecycle(repo).attempt(remediation(), broken, 0, phase="forward", name="taint", rows=[])

    assert (outcome.failed, outcome.stage) == (True, Stage.RENDER)
    assert repo.begun == [] and repo.finished == []


# -- one builder of a stored remediation's variables ----------------------------------------------------


@pytest.fixture(scope="module")
def defs() -> DefinitionSet:
    return load_definitions(BUNDLED_RULES, BUNDLED_PLAYBOOKS, KNOWN_ACTIONS)


def rma_remediation(defs: DefinitionSet) -> tuple[Remediation, list[StepRow]]:
    found = ladder_proposal(defs, "rma-gpu", ALERT, "escalation:gate-failed")
    assert found is not None
    proposal = Proposal(rule_name=found.rule_name, playbook=found.playbook, params=found.params,
                        target=found.target, cooldown=timedelta(minutes=30), require_approval=False)
    plan = remediation_plan(proposal, ALERT, defs, {"code": 79}, escalation=ESCALATION)
    rem = remediation(plan, playbook="rma-gpu")
    rem.params = dict(found.params)
    rows = [
        StepRow(phase="forward", idx=i, name=s.name, action=s.action, status="succeeded", attempts=1, params={},
                output={"bug_report": {"path": "/var/log/bug.gz"}} if s.name == "diagnostics" else {})
        for i, s in enumerate(found.playbook.steps) if s.name != "rma"
    ]
    return rem, rows


async def test_the_approval_page_and_replay_show_the_escalation_history_the_executor_renders(
    defs: DefinitionSet,
) -> None:
    rem, rows = rma_remediation(defs)
    playbook = defs.playbooks["rma-gpu"]
    idx = next(i for i, s in enumerate(playbook.steps) if s.name == "rma")
    steps = lifecycle(Repo())

    executed = await steps.prepare(rem, playbook.steps[idx], idx, "forward", stored_variables(rem, rows))
    previewed = Approvals(steps.rt).preview(rem, rows, gated=None)
    replayed = _actual_steps(rem, rows)

    assert isinstance(executed, Ready)
    assert executed.rendered["history"] == HISTORY
    assert next(p for p in previewed if p.name == "rma").params["history"] == HISTORY
    assert next(v for v in replayed if v["name"] == "rma")["params"]["history"] == HISTORY


# -- an undo is a step of its own ----------------------------------------------------------------------


def test_an_undo_runs_with_the_forward_steps_timeout_and_retries_and_the_defaults_when_it_is_gone(
    defs: DefinitionSet,
) -> None:
    playbook = defs.playbooks["rma-gpu"]
    drain = next(s for s in playbook.steps if s.name == "drain")
    forward = StepRow(phase="forward", idx=1, name="drain", action="drain", status="succeeded", params={},
                      output={})
    undo = RevertStep(forward, "uncordon", {}, templated=False)

    step = undo.as_step(playbook)
    gone = RevertStep(StepRow(phase="forward", idx=9, name="gone", action="cordon", status="succeeded", params={},
                              output={}), "uncordon", {}, templated=False).as_step(playbook)

    assert (step.name, step.action, step.timeout, step.retries) == ("revert:drain", "uncordon", drain.timeout,
                                                                    drain.retries)
    assert drain.timeout == timedelta(minutes=45)
    assert (gone.name, gone.timeout, gone.retries) == ("revert:gone", Step.model_fields["timeout"].default,
                                                       Step.model_fields["retries"].default)
