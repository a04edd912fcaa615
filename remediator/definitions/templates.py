"""Jinja2 templates in step parameters, rendered in a sandbox with strict undefined names.

A string that is exactly one `{{ expr }}` keeps the native type of its value, so
`grace_period: "{{ params.grace_period }}"` gives the action an int and `skip_namespaces: "{{ ... }}"` a list;
any other string renders to text. Templates are parsed at load time (`check_template`), which reports syntax
errors and names outside remediator.definitions.variables.TEMPLATE_VARIABLES. Every rendering runs under
a step, time and output budget (definitions/template_budget.py) and fails with TemplateBudgetExceeded, a
ValueError, past it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateSyntaxError, Undefined, meta, nodes
from jinja2.environment import TemplateExpression

from remediator.definitions.template_budget import MAX_OUTPUT, BudgetedSandbox, budget
from remediator.definitions.variables import TEMPLATE_VARIABLES

__all__ = [
    "TemplateProblem",
    "check_template",
    "is_template",
    "referenced_variables",
    "render_params",
    "render_value",
]

_ENV = BudgetedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)
_MARKERS = ("{{", "{%", "{#")
_MAX_TEMPLATE = 16 * 1024
_MAX_OUTPUT = MAX_OUTPUT
_SINGLE = re.compile(r"^\s*\{\{(?P<expr>.*)\}\}\s*$", re.DOTALL)


class TemplateProblem(ValueError):
    """A template that cannot be parsed or names something templates cannot see."""

    def __init__(self, message: str, line: int = 1) -> None:
        self.line = line
        super().__init__(message)


def is_template(value: Any) -> bool:
    """True for a string, or a list/mapping holding a string, with Jinja2 markup."""
    if isinstance(value, str):
        return any(marker in value for marker in _MARKERS)
    if isinstance(value, Mapping):
        return any(is_template(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(is_template(v) for v in value)
    return False


@lru_cache(maxsize=4096)
def _parse(source: str) -> nodes.Template:
    return _ENV.parse(source)


def _single_expression(source: str) -> str | None:
    """The expression of a string that is exactly one `{{ expr }}` (and nothing else), else None."""
    m = _SINGLE.match(source)
    if m is None:
        return None
    ast = _parse(source.strip())
    body = ast.body
    if len(body) != 1 or not isinstance(body[0], nodes.Output) or len(body[0].nodes) != 1:
        return None
    return None if isinstance(body[0].nodes[0], nodes.TemplateData) else m.group("expr")


def referenced_variables(template: str) -> set[str]:
    """Top-level names a template reads (e.g. {'params', 'xid'}). Raises TemplateSyntaxError."""
    return set(meta.find_undeclared_variables(_parse(template)))


def check_template(template: str) -> None:
    """Parse a template and check its names; raise TemplateProblem with the line inside the template."""
    if len(template) > _MAX_TEMPLATE:
        raise TemplateProblem(f"template longer than {_MAX_TEMPLATE} characters")
    try:
        names = referenced_variables(template)
    except TemplateSyntaxError as exc:
        raise TemplateProblem(f"template syntax error: {exc.message}", exc.lineno or 1) from None
    unknown = sorted(names - set(TEMPLATE_VARIABLES))
    if unknown:
        known = ", ".join(sorted(TEMPLATE_VARIABLES))
        raise TemplateProblem(f"unknown template variable {', '.join(map(repr, unknown))} (known: {known})")


def render_value(value: Any, variables: Mapping[str, Any]) -> Any:
    """Render one value: strings as templates, lists and mappings recursively, anything else as is.

    Raises jinja2 errors (UndefinedError for unknown names, SecurityError for sandbox violations).
    """
    if isinstance(value, str):
        if not any(marker in value for marker in _MARKERS):
            return value
        expr = _single_expression(value)
        with budget():
            if expr is not None:
                result = _expression(expr)(**variables)
                if isinstance(result, Undefined):
                    str(result)  # StrictUndefined raises UndefinedError naming the missing variable
                return result
            return _render_bounded(_parse_template(value), variables)
    if isinstance(value, Mapping):
        return {str(k): render_value(v, variables) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render_value(v, variables) for v in value]
    return value


def _render_bounded(template: Template, variables: Mapping[str, Any]) -> str:
    """Render, counting the output as it is produced; stop at the cap instead of building it whole."""
    parts: list[str] = []
    size = 0
    for part in template.generate(**variables):
        size += len(part)
        if size > _MAX_OUTPUT:
            raise ValueError(f"rendered template longer than {_MAX_OUTPUT} characters")
        parts.append(part)
    return "".join(parts)


@lru_cache(maxsize=4096)
def _parse_template(source: str) -> Template:
    return _ENV.from_string(source)


@lru_cache(maxsize=4096)
def _expression(expr: str) -> TemplateExpression:
    return _ENV.compile_expression(expr, undefined_to_none=False)


def render_params(params: Mapping[str, Any], variables: Mapping[str, Any]) -> dict[str, Any]:
    """Render a step's parameter mapping over the template variables."""
    return {str(k): render_value(v, variables) for k, v in params.items()}
