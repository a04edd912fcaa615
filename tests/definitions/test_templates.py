"""Step-parameter templates: native types for single expressions, strict undefined names, a sandbox."""

from __future__ import annotations

from typing import Any

import pytest
from jinja2.exceptions import SecurityError, UndefinedError

from remediator.definitions.templates import (
    check_template,
    is_template,
    referenced_variables,
    render_params,
    render_value,
)
from remediator.errors import TemplateProblem

VARS: dict[str, Any] = {
    "params": {"grace_period": 300, "skip": ["kube-system"], "reason": "", "flag": True},
    "xid": {"code": 79, "resolution": "RESTART_BM"},
    "node": {"name": "gpu-node-1"},
    "gpu": {"uuid": None, "index": "3"},
}


def test_single_expression_keeps_native_type() -> None:
    out = render_params(
        {
            "grace_period": "{{ params.grace_period }}",
            "skip_namespaces": "{{ params.skip }}",
            "flag": " {{ params.flag }} ",
            "code": "{{xid.code}}",
            "none": "{{ gpu.uuid }}",
        },
        VARS,
    )
    assert out == {
        "grace_period": 300,
        "skip_namespaces": ["kube-system"],
        "flag": True,
        "code": 79,
        "none": None,
    }


def test_mixed_text_renders_to_string() -> None:
    assert render_value("xid-{{ xid.code }}", VARS) == "xid-79"
    assert render_value("{{ xid.code }}{{ xid.code }}", VARS) == "7979"
    assert render_value("{{ params.reason or ('xid-' ~ xid.code) }}", VARS) == "xid-79"
    assert render_value("{% if xid.code %}yes{% endif %}", VARS) == "yes"


def test_nested_structures_and_plain_values() -> None:
    params = {"a": ["{{ node.name }}", 1, {"b": "{{ gpu.uuid or gpu.index }}"}], "c": 2.5, "d": "plain"}
    assert render_params(params, VARS) == {"a": ["gpu-node-1", 1, {"b": "3"}], "c": 2.5, "d": "plain"}


@pytest.mark.parametrize(
    "template", ["{{ nothing }}", "{{ params.missing }}", "x-{{ node.missing }}", "{{ nothing.deeper }}"]
)
def test_strict_undefined_raises(template: str) -> None:
    with pytest.raises(UndefinedError):
        render_value(template, VARS)


@pytest.mark.parametrize(
    "template",
    [
        "{{ params.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ node.name.__class__ }}",
        "{{ cycler.__init__.__globals__ }}",
    ],
)
def test_sandbox_blocks_attribute_walks(template: str) -> None:
    with pytest.raises((SecurityError, UndefinedError)):
        render_value(template, VARS)


def test_sandbox_forbids_mutation() -> None:
    with pytest.raises(SecurityError):
        render_value("{{ params.skip.append('x') }}", VARS)
    assert VARS["params"]["skip"] == ["kube-system"]


def test_referenced_variables() -> None:
    assert referenced_variables(
        "{{ params.a }}-{{ xid.code }}{% for p in context.pods %}{{ p.name }}{% endfor %}"
    ) == {
        "params",
        "xid",
        "context",
    }


def test_check_template_reports_unknown_names_and_syntax() -> None:
    check_template("{{ alert.labels.Hostname }} {{ steps.drain.evicted }} {{ target.key }}")
    with pytest.raises(TemplateProblem, match="unknown template variable 'pod'"):
        check_template("{{ pod.name }}")
    with pytest.raises(TemplateProblem, match="syntax error") as info:
        check_template("line one\n{{ x }")
    assert info.value.line == 2


def test_is_template() -> None:
    assert is_template("{{ x }}") and is_template(["a", {"b": "{% if x %}{% endif %}"}])
    assert not is_template("plain") and not is_template(3) and not is_template({"a": "b"})
