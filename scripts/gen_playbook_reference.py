"""Write the reference section of docs/playbooks.md from the models the loader and `remediator test` use.

    python scripts/gen_playbook_reference.py           # rewrite the section between the markers
    python scripts/gen_playbook_reference.py --check   # exit 1 if the section is out of date

Fields, types and defaults come from the pydantic models (Rule, Playbook, Step, RevertSpec, the playbook
test models) and from every registered action's `Params`; the variables from TEMPLATE_VARIABLES. Field
descriptions of rules and playbooks live in FIELD_HELP below: a field without one is an error, so a new
field cannot reach the reference undocumented.
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from remediator.actions.registry import default_registry  # noqa: E402
from remediator.definitions import TEMPLATE_VARIABLES, Playbook, RevertSpec, Rule, Step  # noqa: E402
from remediator.definitions.matchers import Matcher  # noqa: E402
from remediator.domain.durations import format_duration  # noqa: E402
from remediator.tools import playbook_tests as pt  # noqa: E402

DOC = ROOT / "docs" / "playbooks.md"
BEGIN = "<!-- BEGIN GENERATED REFERENCE: scripts/gen_playbook_reference.py -->"
END = "<!-- END GENERATED REFERENCE -->"

FIELD_HELP: dict[type[BaseModel], dict[str, str]] = {
    Rule: {
        "name": "Unique name; recorded on every remediation the rule starts.",
        "match": "Alertmanager matchers, all of which must hold: a list of `label=\"v\"`, `label!=\"v\"`, "
                 "`label=~\"re\"`, `label!~\"re\"` strings, or a mapping `{label: value}` for equality.",
        "playbook": "Name of the playbook to run.",
        "params": "Values for the playbook's `params`, over its defaults (a key the playbook does not declare "
                  "is an error).",
        "priority": "Higher wins when several rules match one alert; equal priorities keep file order.",
        "cooldown": "After a remediation by this rule on a target finishes, matching alerts for the same "
                    "target start nothing for this long.",
        "enabled": "`false` keeps the rule in the file but never matches.",
        "kind": "Alert kind for every `alertname=\"...\"` this rule matches (adds to alert-kinds.yaml).",
        "require_approval": "A person must approve before the first step runs.",
    },
    Playbook: {
        "name": "Unique name, referenced by rules.",
        "description": "Shown in the UI and on approval pages.",
        "target": "What one remediation acts on: `node`, `gpu` (node + GPU), `gpu_instance` (node + GPU + the "
                  "MIG GPU instance of the alert's `gpu_instance` label; the whole GPU when the alert names "
                  "none) or `namespace`. One active remediation per target and playbook; further matching "
                  "alerts are linked to it.",
        "params": "Parameters with their defaults, readable in templates as `params.<name>`.",
        "steps": "The steps, run in order.",
        "on_resolved": "`revert`: when the alert resolves, undo the steps that changed something, newest "
                       "first; `keep`: leave everything as it is.",
        "on_expiry": "When an approval request expires: `abort` the remediation or `continue` without it.",
        "return_gate": "Steps (same form as `steps`) that must all pass whenever the remediation is reverted, "
        "before anything is undone: proof before return to service (e.g. `await_reboot`, `validate_gpu`). "
        "A gate step may wait; one that fails ends the undo with nothing undone (the quarantine stays) and, "
        "for a validation gate, escalates to the next rung of ESCALATION_LADDER.",
    },
    Step: {
        "name": "Unique within the playbook; later steps read this step's output as `steps.<name>`.",
        "action": "One of the actions below.",
        "params": "The action's parameters; string values are Jinja2 templates over the variables below.",
        "when": "CEL condition over the same variables; the step is skipped when it is false.",
        "timeout": "Deadline for the whole step, retries included.",
        "retries": (
            "`0`: a transient error (429, 5xx, connection refused or timed out) is not retried within t"
            "he step: the remediation waits for the dependency at once and runs the step again after `R"
            "EMEDIATOR_DEPENDENCY_RECHECK_S` (for long or costly actions). Any other value: transient e"
            "rrors are retried within `REMEDIATOR_TRANSIENT_BUDGET_S` (a time budget, not a count; docs"
            "/operations.md). A transient error never fails a step; a permanent one (other 4xx) fails i"
            "t at once."
        ),
        "on_failure": "`abort` fails the remediation; `continue` records the failure and goes on.",
        "revert": "How to undo the step: omitted means the action's own undo (see the table of actions), "
                  "`false` means never undone, a mapping `{action, params}` names another action.",
        "approval": "`required`: a person approves before this step runs.",
    },
    RevertSpec: {
        "action": "The action that undoes the step.",
        "params": "Its parameters (templates, like a step's).",
    },
}


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" if not isinstance(a, bool) else f"`{str(a).lower()}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        text = " or ".join(_type(a) for a in rest)
        return f"{text} or null" if len(rest) < len(args) else text
    if origin in (list, tuple, set, frozenset):
        inner = [a for a in args if a is not Ellipsis]
        return f"list of {_type(inner[0])}" if inner else "list"
    if origin is dict:
        # A mapping of anything JSON holds (JsonValue, a recursive alias the loader keeps as a string) is a mapping.
        if not args or args[1] in (Any, object) or _is_json(args[1]):
            return "mapping"
        return f"mapping of {_type(args[1])}"
    if annotation is timedelta:
        return "duration (`90s`, `5m`, `1h30m`)"
    if annotation is datetime:
        return "timestamp (ISO 8601)"
    if annotation is Matcher:
        return "matcher"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value is None:
        return "`null`"
    if isinstance(value, timedelta):
        return f"`{format_duration(value)}`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, BaseModel):
        return "(see below)"
    if isinstance(value, list | tuple | dict) and not value:
        return "`[]`" if not isinstance(value, dict) else "`{}`"
    return f"`{value}`"


def _default(field: Any) -> str:
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        return _value(field.default_factory())
    if field.default is PydanticUndefined:
        return "**required**"
    return _value(field.default)


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def model_table(model: type[BaseModel], help_texts: dict[str, str] | None = None) -> list[str]:
    texts = {
        name: (help_texts or {}).get(name) or field.description or "" for name, field in model.model_fields.items()
    }
    for name, text in texts.items():
        if help_texts is not None and not text:
            raise SystemExit(f"{model.__name__}.{name} has no description in FIELD_HELP ({__file__})")
    explained = any(texts.values())
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"] if explained else [
        "| field | type | default |", "|---|---|---|"
    ]
    for name, field in model.model_fields.items():
        row = f"| `{field.alias or name}` | {_cell(_type(field.annotation))} | {_default(field)} |"
        lines.append(f"{row} {_cell(texts[name])} |" if explained else row)
    return lines


def _is_json(annotation: Any) -> bool:
    return "JsonValue" in str(annotation)


def _doc_line(obj: Any) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def section(title: str, model: type[BaseModel], help_texts: dict[str, str] | None = None) -> list[str]:
    return [f"#### {title}", "", _cell(_doc_line(model)), "", *model_table(model, help_texts), ""]


def actions_reference() -> list[str]:
    lines = [
        "### Actions",
        "",
        "Every action is idempotent and records what it found, so its undo restores exactly that. "
        "*mutating*: stopped by the kill switch; *quarantines*: counts toward `MAX_QUARANTINED_NODES`.",
        "",
    ]
    for name, action in sorted(default_registry().items()):
        flags = [f for f, on in (("mutating", action.mutating), ("quarantines", action.quarantines)) if on]
        undo = f"; undone by `{action.default_revert}`" if action.default_revert else ""
        lines.append(f"#### `{name}`")
        lines.append("")
        summary = _cell(_doc_line(type(action)))
        lines.append(f"{summary + ' ' if summary else ''}*({', '.join(flags) or 'read-only'}{undo})*")
        lines.append("")
        if action.Params.model_fields:
            lines.extend(model_table(action.Params))
        else:
            lines.append("No parameters.")
        lines.append("")
        for old_key, (new_key, why) in getattr(action.Params, "deprecated_keys", {}).items():
            lines.append(
                f"`{old_key}` is the deprecated name of `{new_key}`: still accepted, reported as a warning by "
                f"`remediator check` and logged on load ({why})."
            )
            lines.append("")
    return lines


def variables_reference() -> list[str]:
    lines = [
        "### Template and condition variables",
        "",
        "The same names in Jinja2 templates (`{{ node.name }}`) and CEL conditions (`xid.code == 79`); "
        "reading any other top-level name is a load-time error.",
        "",
        "| variable | meaning |",
        "|---|---|",
    ]
    for top, fields in TEMPLATE_VARIABLES.items():
        for key, meaning in fields.items():
            shown = f"{top}.{key}" if key != "..." else f"{top}.*"
            lines.append(f"| `{shown}` | {_cell(meaning)} |")
    lines.append("")
    return lines


def test_models() -> Iterable[type[BaseModel]]:
    return (
        pt.PlaybookTestFile, pt.PlaybookTest, pt.AlertSpec, pt.ClusterSnapshot, pt.FleetFacts, pt.Expectation,
        pt.StepExpectation, pt.GuardrailExpectation,
    )


def render() -> str:
    lines = [
        BEGIN,
        "",
        "<!-- Generated from the models; edit the models or scripts/gen_playbook_reference.py, then run it. -->",
        "",
        "### Definition files",
        "",
        *section("Rule", Rule, FIELD_HELP[Rule]),
        *section("Playbook", Playbook, FIELD_HELP[Playbook]),
        *section("Step", Step, FIELD_HELP[Step]),
        *section("RevertSpec", RevertSpec, FIELD_HELP[RevertSpec]),
        *variables_reference(),
        *actions_reference(),
        "### Playbook test files",
        "",
    ]
    for model in test_models():
        lines.extend(section(model.__name__, model))
    lines.append(END)
    return "\n".join(lines) + "\n"


def splice(doc: str, generated: str) -> str:
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: markers {BEGIN!r} and {END!r} not found")
    head = doc[: doc.index(BEGIN)]
    tail = doc[doc.index(END) + len(END):].lstrip("\n")
    return head + generated + ("\n" + tail if tail else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/playbooks.md is out of date")
    args = parser.parse_args(argv)
    current = DOC.read_text()
    wanted = splice(current, render())
    if args.check:
        if current != wanted:
            print(f"{DOC}: reference out of date; run python scripts/gen_playbook_reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
