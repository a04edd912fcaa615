"""Jinja2 templates in step parameters, rendered in a sandbox with strict undefined names.

A string that is exactly one `{{ expr }}` keeps the native type of its value, so
`grace_period: "{{ params.grace_period }}"` gives the action an int and `skip_namespaces: "{{ ... }}"` a list;
any other string renders to text. Templates are parsed at load time (`check_template`), which reports syntax
errors, names outside remediator.definitions.variables.TEMPLATE_VARIABLES, and a read of a `context` key
that not every context carries (variables.CONTEXT_ALWAYS: without cluster access the context holds only the
alert's pods and the node's name, so `context.node.boot_id` is not there; it must be read guarded, as
`context.node.get('boot_id')`, `... | default(...)` or under `... is defined`). Every rendering runs under
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
from remediator.definitions.variables import CONTEXT_ALWAYS, TEMPLATE_VARIABLES
from remediator.errors import TemplateProblem

__all__ = [
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


def is_template(value: object) -> bool:
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
    if "context" in names:
        _check_context_reads(_parse(template))


# Methods of a mapping that read it without raising for a missing key (`context.node.get('boot_id')`).
_SAFE_METHODS = frozenset({"get", "items", "keys", "values"})
_DEFAULT_FILTERS = frozenset({"default", "d"})
_DEFINED_TESTS = frozenset({"defined", "undefined"})
KeyPath = tuple[str, ...]


def _context_path(node: nodes.Node) -> KeyPath | None:
    """The constant key path of `context.a.b` or `context['a']['b']`; None when not rooted at `context` or
    when a key is computed (then only the part before it can be checked)."""
    keys: list[str] = []
    while True:
        if isinstance(node, nodes.Getattr):
            keys.append(node.attr)
            node = node.node
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            keys.append(node.arg.value)
            node = node.node
        elif isinstance(node, nodes.Name) and node.name == "context":
            return tuple(reversed(keys))
        else:
            return None


def _not_always_there(path: KeyPath) -> KeyPath | None:
    """The shortest prefix of `path` that the context may lack, or None when every key of it is always there."""
    shape: Mapping[str, Any] | None = CONTEXT_ALWAYS
    for depth, key in enumerate(path):
        if shape is None:  # an opaque value (the pod list, a string): not the context's own keys any more
            return None
        if key not in shape:
            return path[: depth + 1]
        shape = shape[key]
    return None


def _defined_in(test: nodes.Node, name: str) -> set[KeyPath]:
    """Paths that `test` proves `is <name>` (`defined`/`undefined`), directly or as a term of an `and`."""
    if isinstance(test, nodes.And):
        return _defined_in(test.left, name) | _defined_in(test.right, name)
    if isinstance(test, nodes.Test) and test.name == name:
        path = _context_path(test.node)
        return {path} if path else set()
    return set()


def _check_context_reads(ast: nodes.Template) -> None:
    """Raise TemplateProblem at the first unguarded read of a context key that the context may not carry."""

    def refuse(node: nodes.Node, missing: KeyPath) -> None:
        parent, key = ".".join(("context", *missing[:-1])), missing[-1]
        raise TemplateProblem(
            f"template reads context.{'.'.join(missing)}, which not every remediation's context carries "
            f"(without cluster access it holds only {_always_text()}); read it as {parent}.get({key!r}) "
            f"or with | default(...)",
            getattr(node, "lineno", 1) or 1,
        )

    def read(node: nodes.Node, path: KeyPath, guarded: set[KeyPath], *, last_guarded: bool = False) -> None:
        missing = _not_always_there(path)
        if missing is None or missing in guarded or (last_guarded and missing == path):
            return
        refuse(node, missing)

    def visit(node: nodes.Node, guarded: set[KeyPath]) -> None:
        path = _context_path(node)
        if path:
            read(node, path, guarded)
            return
        if isinstance(node, nodes.Getitem) and _context_path(node.node):
            read(node, _context_path(node.node) or (), guarded)  # a computed key: check what leads to it
            visit(node.arg, guarded)
            return
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.node.attr in _SAFE_METHODS:
            owner = _context_path(node.node.node)
            if owner is not None:
                if owner:
                    read(node, owner, guarded)
                for argument in (*node.args, *node.kwargs, node.dyn_args, node.dyn_kwargs):
                    if argument is not None:
                        visit(argument, guarded)
                return
        if isinstance(node, nodes.Filter | nodes.Test) and node.node is not None:
            names = _DEFAULT_FILTERS if isinstance(node, nodes.Filter) else _DEFINED_TESTS
            path = _context_path(node.node)
            if path and node.name in names:
                read(node, path, guarded, last_guarded=True)
                for filter_arg in (*node.args, *node.kwargs):
                    visit(filter_arg, guarded)
                return
        if isinstance(node, nodes.CondExpr):
            visit(node.test, guarded)
            visit(node.expr1, guarded | _defined_in(node.test, "defined"))
            if node.expr2 is not None:
                visit(node.expr2, guarded | _defined_in(node.test, "undefined"))
            return
        if isinstance(node, nodes.If):
            visit(node.test, guarded)
            for statement in node.body:
                visit(statement, guarded | _defined_in(node.test, "defined"))
            otherwise = guarded | _defined_in(node.test, "undefined")
            for branch in (*node.elif_, *node.else_):
                visit(branch, otherwise)
            return
        for child in node.iter_child_nodes():
            visit(child, guarded)

    visit(ast, set())


def _always_text() -> str:
    out: list[str] = []
    for key, inner in CONTEXT_ALWAYS.items():
        out.extend([f"{key}.{sub}" for sub in inner] if inner else [key])
    return ", ".join(out)


def render_value(value: object, variables: Mapping[str, object]) -> Any:
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


def _render_bounded(template: Template, variables: Mapping[str, object]) -> str:
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


def render_params(params: Mapping[str, object], variables: Mapping[str, object]) -> dict[str, Any]:
    """Render a step's parameter mapping over the template variables."""
    return {str(k): render_value(v, variables) for k, v in params.items()}
