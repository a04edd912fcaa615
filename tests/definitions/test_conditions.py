"""CEL `when:` conditions: compile-time errors, bool-only results, and hostile input that does no harm."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from remediator.definitions.conditions import MAX_EXPRESSION_LENGTH, compile_condition
from remediator.errors import ConditionError

VARS: dict[str, Any] = {
    "alert": {"name": "GPUXidError", "labels": {"xid": "79", "Hostname": "n1"}, "annotations": {}},
    "xid": {
        "code": 79,
        "resolution": "RESTART_BM",
        "cause": "x",
        "description": "y",
        "recovery_action": None,
    },
    "gpu": {"uuid": None, "index": "0"},
    "node": {"name": "n1"},
    "params": {"drain": True, "max": 3},
    "context": {"pods": [{"name": "a", "namespace": "ml"}, {"name": "b", "namespace": "kube-system"}]},
    "steps": {"drain": {"evicted": 2}},
    "target": {"kind": "node", "key": "node:n1"},
}
ATTACKS = Path(__file__).with_name("cel_attacks.txt")
CANARY = Path("/tmp/remediator-cel-pwned")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("xid.code == 79", True),
        ('xid.resolution in ["RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48"]', True),
        ("xid.recovery_action == null", True),
        ("gpu.uuid != null", False),
        ("params.drain && params.max > 2", True),
        ("context.pods.exists(p, p.namespace == 'ml')", True),
        ("context.pods.all(p, p.namespace != 'kube-system')", False),
        ("size(context.pods) == 2", True),
        ("steps.drain.evicted > 0", True),
        ("has(alert.labels.xid) && alert.labels.xid == '79'", True),
        ("alert.labels.Hostname.startsWith('n')", True),
        ("target.kind == 'node'", True),
    ],
)
def test_evaluates(expr: str, expected: bool) -> None:
    assert compile_condition(expr).evaluate(VARS) is expected


@pytest.mark.parametrize("expr", ["xid.code ==", "&& true", "alert.labels[", "1 +* 2"])
def test_syntax_error_at_compile(expr: str) -> None:
    with pytest.raises(ConditionError, match="CEL syntax error"):
        compile_condition(expr)


def test_syntax_error_line_inside_expression() -> None:
    with pytest.raises(ConditionError) as info:
        compile_condition("xid.code == 79 &&\n  xid.code ==")
    assert info.value.line == 2


def test_unknown_variable_at_compile() -> None:
    with pytest.raises(ConditionError, match="unknown variable 'pods'"):
        compile_condition("size(pods) > 0")
    compile_condition("context.pods.exists(pod, pod.name == 'a')")


@pytest.mark.parametrize("expr", ["xid.code", "'yes'", "context.pods", "1 + 1"])
def test_non_bool_is_an_error(expr: str) -> None:
    with pytest.raises(ConditionError, match="must give a bool"):
        compile_condition(expr).evaluate(VARS)


def test_missing_key_is_an_evaluation_error() -> None:
    with pytest.raises(ConditionError, match="failed"):
        compile_condition("alert.labels.nope == 'x'").evaluate(VARS)


def test_too_long_is_rejected() -> None:
    with pytest.raises(ConditionError, match="longer than"):
        compile_condition("true && " * (MAX_EXPRESSION_LENGTH // 8 + 1) + "true")


def test_deep_nesting_is_rejected() -> None:
    with pytest.raises(ConditionError):
        compile_condition("(" * 500 + "true" + ")" * 500)


def _attacks() -> list[str]:
    lines = ATTACKS.read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("expr", _attacks())
def test_attack_strings_are_harmless(expr: str) -> None:
    before = dict(os.environ)
    try:
        condition = compile_condition(expr)
    except ConditionError:
        return
    try:
        result = condition.evaluate(VARS)
    except ConditionError:
        result = None
    assert result in (True, False, None)
    assert not CANARY.exists()
    assert dict(os.environ) == before
    assert VARS["params"] == {"drain": True, "max": 3}


@pytest.mark.timeout(10)
def test_very_long_string_literal_is_rejected_or_harmless() -> None:
    expr = "'" + "a" * 100_000 + "' == 'a'"
    with pytest.raises(ConditionError, match="longer than"):
        compile_condition(expr)
