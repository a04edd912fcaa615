"""The pure stages of a playbook step, in order, and what preparing a step comes to.

A step applies (its `when`), may wait for a person (its approval), has its parameters rendered from the
variables (its template) and parsed by its action (its parameters). The live path (engine/step_lifecycle.py)
runs these stages and then begins, runs and records the step; the offline tools (plan-only, `remediator
test`, `replay`, `simulate`) run the same stages through `plan_steps` (engine/planning.py) without a cluster
or a database. Preparing gives one typed value: the step runs (`Ready`), is skipped (`Skipped`), waits for a
person (`NeedsApproval`), or failed at a named stage (`Failed`).
"""

from __future__ import annotations

import enum
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remediator.actions.base import AnyAction
from remediator.definitions import Step
from remediator.definitions.conditions import compile_condition
from remediator.definitions.templates import render_params
from remediator.errors import ActionError

__all__ = [
    "Failed", "NeedsApproval", "Prepared", "Ready", "Skipped", "Stage", "applies", "approval_required", "bounded",
    "failure_reason", "last_line", "parse", "prepare", "render",
]


class Stage(enum.StrEnum):
    """Where in its lifecycle a step is (and where it failed). `word` is how a step's failure names it."""

    APPLIES = "applies"
    APPROVAL = "approval"
    RENDER = "render"
    PARSE = "parse"
    BEGIN = "begin"
    RUN = "run"
    RECORD = "record"

    @property
    def word(self) -> str:
        """The stage as a step's failure reason says it (`template error: ...`), unchanged for readers."""
        return _WORDS[self]


_WORDS: dict[Stage, str] = {
    Stage.APPLIES: "condition", Stage.APPROVAL: "approval", Stage.RENDER: "template", Stage.PARSE: "parameters",
    Stage.BEGIN: "action", Stage.RUN: "action", Stage.RECORD: "output",
}


@dataclass(frozen=True)
class Ready:
    """The step runs: its rendered parameters (as stored on its row) and the action's parsed ones."""

    action: AnyAction
    rendered: dict[str, Any]
    params: Any  # the action's own Params model (`Action.parse`)


@dataclass(frozen=True)
class Skipped:
    """The step's `when` is false: it is recorded skipped with this reason."""

    reason: str


@dataclass(frozen=True)
class NeedsApproval:
    """The step waits for a person's approval before it renders or runs."""


@dataclass(frozen=True)
class Failed:
    """The step failed at `stage`: `error` is the reason as recorded (`<stage word> error: ...`), `rendered`
    the parameters rendered before it failed (empty when it failed before rendering)."""

    stage: Stage
    error: str
    rendered: dict[str, Any]


Prepared = Ready | Skipped | NeedsApproval | Failed


def applies(step: Step, variables: Mapping[str, Any]) -> bool:
    """The step's `when` (a CEL condition) over the variables; a step without one always applies."""
    if not step.when:
        return True
    return compile_condition(step.when).evaluate(variables)


def approval_required(step: Step, index: int, require_approval: bool) -> bool:
    """Does step `index` wait for a human: its own `approval: required`, or the rule's `require_approval`
    (which gates the first step)? The live path and every plan-only tool ask this."""
    return step.approval == "required" or (require_approval and index == 0)


def render(params: Mapping[str, Any], variables: Mapping[str, Any]) -> dict[str, Any]:
    """The step's parameters rendered once from the variables (alert text enters only as variables)."""
    return render_params(params, variables)


def parse(step: Step, action: AnyAction | None, rendered: Mapping[str, Any]) -> Any:
    """The action's parsed parameters; LookupError for an action the registry does not know."""
    if action is None:
        raise LookupError(f"unknown action {step.action!r}")
    return action.parse(dict(rendered))


def skipped_reason(step: Step) -> str:
    return f"when: {step.when} is false"


def prepare(
    step: Step, action: AnyAction | None, variables: Mapping[str, Any], *, needs_approval: bool = False
) -> Prepared:
    """Run the pure stages of `step` in order: applies, approval, render, parse.

    `needs_approval`: the step waits for a person (its approval is required and not given: the caller knows
    the stored approval)."""
    stage = Stage.APPLIES
    rendered: dict[str, Any] = {}
    try:
        if not applies(step, variables):
            return Skipped(skipped_reason(step))
        stage = Stage.APPROVAL
        if needs_approval:
            return NeedsApproval()
        stage = Stage.RENDER
        rendered = render(step.params, variables)
        stage = Stage.PARSE
        params = parse(step, action, rendered)
    except Exception as exc:  # the step error boundary: any error in a stage is the step's failure at it
        return Failed(stage, f"{stage.word} error: {failure_reason(exc)}", rendered)
    assert action is not None  # parse raised otherwise
    return Ready(action, rendered, params)


MAX_REASON = 2000


def last_line(exc: BaseException) -> str:
    """The last line of the exception's traceback (`UndefinedError: 'x' is undefined`), bounded."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    line = text[-1] if text else type(exc).__name__
    return bounded(line)


def failure_reason(exc: BaseException) -> str:
    """A step failure's reason: the error's type and message, on one bounded line."""
    message = exc.message if isinstance(exc, ActionError) else str(exc)
    lines = [line.strip() for line in message.splitlines() if line.strip()]  # e.g. pydantic's field lines
    return bounded(f"{type(exc).__name__}: {'; '.join(lines)}".rstrip(": "))


def bounded(text: str) -> str:
    """A reason cut to MAX_REASON characters."""
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"
