"""Step conditions (`when:`) in CEL, through cel-python's interpreter: no Python eval, no attribute walks.

Expressions are compiled at load time, so syntax errors and unknown top-level names are definition errors
with file:line; at run time they are evaluated over the same variables as templates and must yield a bool.
Expression size and nesting are bounded so a hostile definition cannot exhaust the parser, and every
evaluation runs under a budget of interpreter steps and a deadline (`MAX_STEPS`, `MAX_SECONDS`): nested
macros over large lists fail with a ConditionError instead of pinning the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, Evaluator

from remediator.definitions.variables import TEMPLATE_VARIABLES
from remediator.errors import ConditionError

__all__ = ["Condition", "compile_condition", "to_cel"]

MAX_EXPRESSION_LENGTH = 4096
MAX_NESTING = 64
MAX_STEPS = 100_000  # interpreter steps (tree nodes visited, macro bodies included) per evaluation
MAX_SECONDS = 1.0  # wall clock per evaluation
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_FUNCTIONS = frozenset(
    {
        "has",
        "dyn",
        "bool",
        "bytes",
        "double",
        "duration",
        "int",
        "list",
        "map",
        "size",
        "string",
        "timestamp",
        "type",
        "uint",
        "matches",
        "contains",
        "startsWith",
        "endsWith",
    }
)
_METHODS = _MACROS | frozenset(
    {
        "matches",
        "contains",
        "startsWith",
        "endsWith",
        "size",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getHours",
        "getMilliseconds",
        "getMinutes",
        "getMonth",
        "getSeconds",
    }
)


class _OutOfBudget(BaseException):
    """Raised inside the interpreter; a BaseException so cel-python's error handling cannot swallow it."""


class _Budget:
    def __init__(self) -> None:
        self.steps = MAX_STEPS
        self.deadline = time.monotonic() + MAX_SECONDS
        self.exceeded = ""

    def spend(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            self.exceeded = f"more than {MAX_STEPS} evaluation steps"
        elif self.steps % 64 == 0 and time.monotonic() > self.deadline:
            self.exceeded = f"longer than {MAX_SECONDS:g}s"
        if self.exceeded:
            raise _OutOfBudget(self.exceeded)


_BUDGET: ContextVar[_Budget | None] = ContextVar("remediator_condition_budget", default=None)


class _BudgetedEvaluator(Evaluator):
    """cel-python's interpreter, counting every subtree it evaluates against the current budget."""

    def visit_children(self, tree: lark.Tree[Any]) -> list[Any]:
        budget = _BUDGET.get()
        if budget is not None:
            budget.spend()
        return super().visit_children(tree)

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _BudgetedEvaluator(ast, activation=self.activation)


class _BudgetedRunner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return _BudgetedEvaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


@lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    return celpy.Environment(runner_class=_BudgetedRunner)


def _nesting(text: str) -> int:
    depth = deepest = 0
    quote = ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def _names(tree: lark.Tree[Any]) -> tuple[set[str], set[str], set[str]]:
    """(identifiers read, identifiers bound by macros such as exists(x, ...), functions/methods called)."""
    used: set[str] = set()
    bound: set[str] = set()
    called: set[str] = set()
    for node in tree.iter_subtrees():
        if not node.children:
            continue
        if node.data == "ident":
            used.add(str(node.children[0]))
        elif node.data in ("ident_arg", "dot_ident_arg"):
            called.add(str(node.children[0]))
        elif node.data == "member_dot_arg" and len(node.children) >= 2:
            method = str(node.children[1])
            if method not in _METHODS:
                called.add("." + method)
            elif method in _MACROS and len(node.children) >= 3:
                bound |= _macro_variable(node.children[2])
    return used, bound, called


def _macro_variable(args: object) -> set[str]:
    if not isinstance(args, lark.Tree) or not args.children or not isinstance(args.children[0], lark.Tree):
        return set()
    first = args.children[0]
    return {str(sub.children[0]) for sub in first.iter_subtrees() if sub.data == "ident" and sub.children}


def to_cel(value: object) -> Any:
    """Plain data -> CEL values (mappings, lists, scalars; datetimes and timedeltas as CEL types)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, datetime):
        return celtypes.TimestampType(value)
    if isinstance(value, timedelta):
        return celtypes.DurationType(value)
    if isinstance(value, Mapping):
        return celtypes.MapType({celtypes.StringType(str(k)): to_cel(v) for k, v in value.items()})
    if isinstance(value, list | tuple | set | frozenset):
        return celtypes.ListType([to_cel(v) for v in value])
    return celtypes.StringType(str(value))


def _reason(exc: Exception) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    return text if len(text) <= 200 else text[:200] + "..."


@dataclass(frozen=True)
class Condition:
    """A compiled CEL expression."""

    source: str
    program: Any

    def evaluate(self, variables: Mapping[str, object]) -> bool:
        """True or False; raises ConditionError on an evaluation error or a non-bool result."""
        activation = {name: to_cel(value) for name, value in variables.items()}
        budget = _Budget()
        token = _BUDGET.set(budget)
        try:
            result = self.program.evaluate(activation)
        except _OutOfBudget:
            raise ConditionError(f"condition {self.source!r} refused: it took {budget.exceeded}") from None
        except CELEvalError as exc:
            raise ConditionError(f"condition {self.source!r} failed: {_reason(exc)}") from None
        except (RecursionError, ValueError, TypeError, ArithmeticError, LookupError) as exc:
            raise ConditionError(f"condition {self.source!r} failed: {type(exc).__name__}: {exc}") from None
        finally:
            _BUDGET.reset(token)
        if isinstance(result, CELEvalError):
            raise ConditionError(f"condition {self.source!r} failed: {_reason(result)}")
        if not isinstance(result, celtypes.BoolType | bool):
            shown = type(result).__name__.removesuffix("Type").lower()
            raise ConditionError(f"condition {self.source!r} must give a bool, gave {shown}")
        return bool(result)


@lru_cache(maxsize=2048)
def compile_condition(source: str) -> Condition:
    """Compile a CEL expression and check its names; raises ConditionError (with the line inside it)."""
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise ConditionError(f"condition longer than {MAX_EXPRESSION_LENGTH} characters")
    if _nesting(source) > MAX_NESTING:
        raise ConditionError(f"condition nested deeper than {MAX_NESTING} levels")
    env = _environment()
    try:
        tree = env.compile(source)
    except CELParseError as exc:
        line = getattr(exc, "line", None) or 1
        column = getattr(exc, "column", None)
        text = source.splitlines()[line - 1] if line <= len(source.splitlines()) else source
        where = f"column {column} of {text.strip()!r}" if column else repr(text.strip())
        raise ConditionError(f"CEL syntax error at {where}", line) from None
    except RecursionError:
        raise ConditionError("condition nested too deeply") from None
    used, bound, called = _names(tree)
    functions = sorted(called - _FUNCTIONS)
    if functions:
        raise ConditionError(f"unknown function {', '.join(map(repr, functions))} in condition")
    unknown = sorted(used - bound - set(TEMPLATE_VARIABLES))
    if unknown:
        known = ", ".join(sorted(TEMPLATE_VARIABLES))
        names = ", ".join(map(repr, unknown))
        raise ConditionError(f"unknown variable {names} in condition (known: {known})")
    try:
        program = env.program(tree)
    except (CELEvalError, ValueError, TypeError) as exc:
        raise ConditionError(f"condition cannot be prepared: {exc}") from None
    return Condition(source=source, program=program)
