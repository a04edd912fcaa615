"""Every definition problem is reported with its file, line and field path, all in one pass."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel

from remediator.definitions import load_definitions
from remediator.errors import DefinitionError, DefinitionSetError

Tree = Callable[[dict[str, str]], tuple[Path, Path]]

RULES = """
rules:
  - name: fatal
    match:
      - alertname="GPUXidError"
    playbook: quarantine
"""

PLAYBOOK = """
name: quarantine
params:
  reason: ""
steps:
  - name: cordon
    action: cordon
  - name: taint
    action: taint
    params:
      value: "{{ params.reason or xid.code }}"
      effect: NoSchedule
"""


def problems(tree: Tree, known: dict[str, type[BaseModel]], files: dict[str, str]) -> list[DefinitionError]:
    rules, playbooks = tree({"rules/r.yaml": RULES, "playbooks/p.yaml": PLAYBOOK, **files})
    with pytest.raises(DefinitionSetError) as info:
        load_definitions(rules, playbooks, known)
    return info.value.errors


def rendered(errors: list[DefinitionError], root: Path) -> list[str]:
    return [e.render().replace(str(root) + "/", "") for e in errors]


def test_valid_tree_loads(tree: Tree, known_actions: dict[str, type[BaseModel]]) -> None:
    rules, playbooks = tree({"rules/r.yaml": RULES, "playbooks/p.yaml": PLAYBOOK})
    defs = load_definitions(rules, playbooks, known_actions)
    assert [r.name for r in defs.rules] == ["fatal"]
    assert defs.playbooks["quarantine"].steps[1].params["effect"] == "NoSchedule"
    assert set(defs.sources) >= {"rules/r.yaml", "playbooks/p.yaml"}
    assert len(defs.version) == 12


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK.replace("action: cordon", "action: cordn")},
            "playbooks/p.yaml:6: unknown action 'cordn'",
            id="unknown-action",
        ),
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK.replace("effect: NoSchedule", "efect: NoSchedule")},
            "playbooks/p.yaml:11: unknown parameter 'efect' for action 'taint'",
            id="unknown-param",
        ),
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK.replace("effect: NoSchedule", "effect: Sometimes")},
            "playbooks/p.yaml:11: invalid value for taint parameter 'effect'",
            id="bad-literal-param",
        ),
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK + "  - name: label\n    action: label\n    params: {value: x}\n"},
            "playbooks/p.yaml:14: missing required parameter 'key' for action 'label'",
            id="missing-required-param",
        ),
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK.replace("action: cordon", "action: cordon\n    when: xid.code ==")},
            "playbooks/p.yaml:7: CEL syntax error",
            id="bad-cel",
        ),
        pytest.param(
            {
                "playbooks/p.yaml": PLAYBOOK.replace(
                    "action: cordon", "action: cordon\n    when: pod.name == 'x'"
                )
            },
            "playbooks/p.yaml:7: unknown variable 'pod' in condition",
            id="cel-unknown-variable",
        ),
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK.replace("xid.code }}", "xdi.code }}")},
            "playbooks/p.yaml:10: unknown template variable 'xdi'",
            id="unknown-template-variable",
        ),
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK.replace("xid.code }}", "xid.code }")},
            "playbooks/p.yaml:10: template syntax error",
            id="template-syntax",
        ),
        pytest.param(
            {"rules/r.yaml": RULES.replace("playbook: quarantine", "playbook: foo")},
            "rules/r.yaml:5: unknown playbook 'foo' (rules[0].playbook)",
            id="missing-playbook",
        ),
        pytest.param(
            {"rules/r.yaml": RULES + "    cooldown: 5 minutes\n"},
            "rules/r.yaml:6: not a duration: '5 minutes'",
            id="bad-duration",
        ),
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK.replace("action: cordon", "action: cordon\n    timeout: soon")},
            "playbooks/p.yaml:7: not a duration: 'soon'",
            id="bad-step-timeout",
        ),
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK.replace("name: taint", "name: cordon")},
            "playbooks/p.yaml:7: duplicate step name 'cordon'",
            id="duplicate-step",
        ),
        pytest.param(
            {"rules/r.yaml": RULES.replace("    playbook: quarantine", "    playbook: [quarantine")},
            "rules/r.yaml:6: YAML syntax error",
            id="yaml-syntax",
        ),
        pytest.param(
            {"rules/r.yaml": RULES.replace('alertname="GPUXidError"', 'xid=~"(79"')},
            "rules/r.yaml:4: invalid regular expression '(79'",
            id="bad-regex",
        ),
        pytest.param(
            {"rules/r.yaml": RULES.replace('alertname="GPUXidError"', "alertname")},
            "rules/r.yaml:4: cannot parse matcher 'alertname'",
            id="bad-matcher",
        ),
        pytest.param(
            {"rules/r.yaml": RULES + "    params: {reasn: x}\n"},
            "rules/r.yaml:6: playbook 'quarantine' has no parameter 'reasn'",
            id="rule-param-not-in-playbook",
        ),
        pytest.param(
            {"rules/r.yaml": RULES + "    priorty: 3\n"},
            "rules/r.yaml:6: unknown field 'priorty' (rules[0].priorty)",
            id="unknown-rule-field",
        ),
        pytest.param(
            {"rules/r.yaml": RULES.replace("    playbook: quarantine\n", "")},
            "rules/r.yaml:2: missing required field 'playbook' (rules[0].playbook)",
            id="missing-rule-field",
        ),
        pytest.param(
            {"playbooks/p.yaml": PLAYBOOK.replace("action: cordon", "action: cordon\n    revert: true")},
            "playbooks/p.yaml:7: revert must be false or a mapping",
            id="bad-revert",
        ),
        pytest.param(
            {
                "playbooks/p.yaml": PLAYBOOK.replace(
                    "action: cordon", "action: cordon\n    revert: {action: uncordn}"
                )
            },
            "playbooks/p.yaml:7: unknown action 'uncordn'",
            id="unknown-revert-action",
        ),
        pytest.param(
            {"rules/r.yaml": RULES + "    kind: gpu\n"},
            "rules/r.yaml:6: Input should be",
            id="bad-kind",
        ),
        pytest.param(
            {"rules/alert-kinds.yaml": "GPUXidError: fatal\n"},
            "rules/alert-kinds.yaml:1: unknown alert kind 'fatal'",
            id="bad-alert-kind-file",
        ),
        pytest.param(
            {"rules/xid-catalog.yaml": "xids:\n  79: {resolution: REBOOT}\n"},
            "rules/xid-catalog.yaml:2: unknown resolution bucket 'REBOOT'",
            id="bad-catalog-bucket",
        ),
        pytest.param(
            {"rules/r.yaml": RULES + "    name: again\n"},
            "rules/r.yaml:6: duplicate key 'name'",
            id="duplicate-yaml-key",
        ),
    ],
)
def test_problem_is_located(
    tree: Tree,
    known_actions: dict[str, type[BaseModel]],
    tmp_path: Path,
    files: dict[str, str],
    expected: str,
) -> None:
    errors = rendered(problems(tree, known_actions, files), tmp_path)
    assert any(e.startswith(expected.split(" (")[0]) and expected.split(": ", 1)[1] in e for e in errors), (
        errors
    )


def test_all_problems_reported_together(
    tree: Tree, known_actions: dict[str, type[BaseModel]], tmp_path: Path
) -> None:
    bad_playbook = PLAYBOOK.replace("action: cordon", "action: nope").replace("xid.code }}", "nothing }}")
    bad_rules = RULES + "  - name: other\n    match: ['alertname=\"X\"']\n    playbook: missing\n"
    errors = problems(tree, known_actions, {"playbooks/p.yaml": bad_playbook, "rules/r.yaml": bad_rules})
    messages = rendered(errors, tmp_path)
    assert len(messages) == 3, messages
    assert messages[0].startswith("rules/r.yaml:8: unknown playbook 'missing'") or any(
        m.startswith("rules/r.yaml:8: unknown playbook 'missing' (rules[1].playbook)") for m in messages
    )
    assert any(m.startswith("playbooks/p.yaml:6: unknown action 'nope'") for m in messages)
    assert any(m.startswith("playbooks/p.yaml:10: unknown template variable 'nothing'") for m in messages)


def test_templated_params_are_not_validated_at_load(
    tree: Tree, known_actions: dict[str, type[BaseModel]]
) -> None:
    playbook = PLAYBOOK.replace("effect: NoSchedule", 'effect: "{{ params.reason }}"')
    rules, playbooks = tree({"rules/r.yaml": RULES, "playbooks/p.yaml": playbook})
    load_definitions(rules, playbooks, known_actions)


def test_broken_playbook_does_not_also_report_rule_reference(
    tree: Tree, known_actions: dict[str, type[BaseModel]], tmp_path: Path
) -> None:
    errors = problems(tree, known_actions, {"playbooks/p.yaml": PLAYBOOK.replace("steps:", "stepz:")})
    messages = rendered(errors, tmp_path)
    assert not any("unknown playbook" in m for m in messages), messages


def test_missing_directory(tmp_path: Path, known_actions: dict[str, type[BaseModel]]) -> None:
    with pytest.raises(DefinitionSetError) as info:
        load_definitions(tmp_path / "nope", tmp_path / "nada", known_actions)
    assert [e.message for e in info.value.errors] == ["directory not found", "directory not found"]
