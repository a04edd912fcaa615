"""A step and time budget for one template rendering, so no template can pin the event loop or fill memory.

Jinja's sandbox stops attribute escapes but not work: nested `range` loops, `"x" * 10**9`, `9**9**9` or
`"%999999999d" % 1` all run (or allocate) for as long as they like. The environment here:

- counts every loop iteration (each `{% for %}` iterates through a counting wrapper added at compile time),
  every call, filter and attribute lookup against a step budget, and checks a wall-clock deadline as it goes;
- gives `range` a smaller ceiling, counted against the same budget;
- refuses string/list repetition, powers and format widths whose result would pass the output cap before
  computing them, and any call or filter whose result passes it;
- renders through `generate()`, so the output is counted while it is produced.

An evaluation past the budget raises TemplateBudgetExceeded (a ValueError naming what ran out).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from jinja2 import nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from remediator.errors import TemplateBudgetExceeded

__all__ = [
    "MAX_OUTPUT",
    "MAX_RANGE",
    "MAX_SECONDS",
    "MAX_STEPS",
    "BudgetedSandbox",
    "budget",
]

MAX_OUTPUT = 64 * 1024  # characters a rendering (or any value built inside it) may reach
MAX_STEPS = 100_000  # loop iterations + calls + filters + lookups per rendering
MAX_RANGE = 10_000  # items one range() may produce
MAX_SECONDS = 1.0  # wall clock per rendering
_LOOP_GUARD = "__remediator_loop_budget"
_WIDE_FORMAT = re.compile(r"\d{6,}")  # a width or precision of a million or more characters


class _Budget:
    def __init__(self, steps: int, seconds: float) -> None:
        self.steps = steps
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds

    def spend(self, n: int = 1) -> None:
        self.steps -= n
        if self.steps < 0:
            raise TemplateBudgetExceeded(f"template did more than {MAX_STEPS} steps (loops, calls, lookups)")
        if time.monotonic() > self.deadline:
            raise TemplateBudgetExceeded(f"template ran longer than {self.seconds:g}s")


_CURRENT: ContextVar[_Budget | None] = ContextVar("remediator_template_budget", default=None)


@contextmanager
def budget(steps: int = MAX_STEPS, seconds: float = MAX_SECONDS) -> Iterator[_Budget]:
    """The budget for one rendering (nested calls share the outermost one)."""
    current = _CURRENT.get()
    if current is not None:
        yield current
        return
    fresh = _Budget(steps, seconds)
    token = _CURRENT.set(fresh)
    try:
        yield fresh
    finally:
        _CURRENT.reset(token)


def _spend(n: int = 1) -> None:
    current = _CURRENT.get()
    if current is not None:
        current.spend(n)


_T = TypeVar("_T")


def _sized(value: _T) -> _T:
    if isinstance(value, str | bytes | list | tuple | dict) and len(value) > MAX_OUTPUT:
        raise TemplateBudgetExceeded(f"template built a value longer than {MAX_OUTPUT}")
    return value


def _check_format(text: object) -> None:
    if isinstance(text, str) and _WIDE_FORMAT.search(text) and ("%" in text or "{" in text):
        raise TemplateBudgetExceeded("template format width is too large")


def _counted(iterable: Iterable[_T]) -> Iterator[_T]:
    for item in iterable:
        _spend()
        yield item


def _range(*args: int) -> range:
    rng = range(*args)
    if len(rng) > MAX_RANGE:
        raise TemplateBudgetExceeded(f"template range() of more than {MAX_RANGE} items")
    _spend(len(rng))
    return rng


def _guard_filter(name: str, func: Callable[..., object]) -> Callable[..., object]:
    @functools.wraps(func)  # keeps jinja_pass_arg, so context/environment filters still get theirs
    def guarded(*args: object, **kwargs: object) -> object:
        _spend()
        if name in ("center", "indent", "wordwrap") and any(
            isinstance(a, int) and a > MAX_OUTPUT for a in (*args[1:], *kwargs.values())
        ):
            raise TemplateBudgetExceeded(f"template {name} width larger than {MAX_OUTPUT}")
        if name == "format" and args:
            _check_format(args[0])
        return _sized(func(*args, **kwargs))

    return guarded


def _repeat_size(left: object, right: object) -> int | None:
    if isinstance(left, str | bytes | list | tuple) and isinstance(right, int):
        return len(left) * right
    if isinstance(right, str | bytes | list | tuple) and isinstance(left, int):
        return len(right) * left
    return None


class BudgetedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every loop, call, filter and lookup counted (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals["range"] = _range
        self.globals[_LOOP_GUARD] = _counted
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()}

    def _generate(self, source: nodes.Template, name: str | None, filename: str | None,
                  defer_init: bool = False) -> str:
        for loop in source.find_all(nodes.For):
            loop.iter = nodes.Call(nodes.Name(_LOOP_GUARD, "load"), [loop.iter], [], None, None)
        return super()._generate(source, name, filename, defer_init)

    def call_binop(self, context: Context, operator: str, left: object, right: object) -> object:
        _spend()
        if operator == "*":
            size = _repeat_size(left, right)
            if size is not None and size > MAX_OUTPUT:
                raise TemplateBudgetExceeded(f"template repetition longer than {MAX_OUTPUT}")
        elif operator == "**":
            if isinstance(right, int) and isinstance(left, int) and abs(right) > 256 and abs(left) > 1:
                raise TemplateBudgetExceeded("template power too large")
        elif operator == "%":
            _check_format(left)
        return _sized(super().call_binop(context, operator, left, right))

    def call(__self, __context: Context, __obj: object, *args: object, **kwargs: object) -> object:
        _spend()
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str) and any(isinstance(a, int) and a > MAX_OUTPUT for a in (*args, *kwargs.values())):
            raise TemplateBudgetExceeded(f"template string method width larger than {MAX_OUTPUT}")
        return _sized(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: object, attribute: str) -> object:
        _spend()
        if isinstance(obj, str) and attribute in ("format", "format_map"):
            _check_format(obj)
        return super().getattr(obj, attribute)

    def getitem(self, obj: object, argument: object) -> object:
        _spend()
        return super().getitem(obj, argument)
