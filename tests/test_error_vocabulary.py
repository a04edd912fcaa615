"""The error and retry vocabulary holds across remediator/ (issue #32, item 4), read from the source with ast:

- every exception class is under remediator.errors.RemediatorError, and no two exception classes share a name;
- every broad `except` (bare, Exception, BaseException) says why in a comment on its line or the line above;
- no module but remediator/retrying.py imports tenacity (also an import-linter contract).
"""

from __future__ import annotations

import ast
import builtins
import importlib
from collections.abc import Iterator
from pathlib import Path

from remediator.errors import RemediatorError

PACKAGE = Path(__file__).resolve().parent.parent / "remediator"

# A BaseException on purpose: raised inside cel-python's interpreter, whose own handlers catch Exception.
NOT_UNDER_ROOT = {"remediator.definitions.conditions._OutOfBudget"}

_BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def _modules() -> Iterator[tuple[str, Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        yield module, path, ast.parse(path.read_text(), str(path))


def _base_name(base: ast.expr) -> str:
    return base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""


def _exception_classes() -> list[tuple[str, str]]:
    """(module, class name) of every class deriving, directly or through others, from an exception."""
    classes = [
        (module, node.name, {_base_name(b) for b in node.bases})
        for module, _, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    ]
    known = set(_BUILTIN_EXCEPTIONS)
    found: dict[tuple[str, str], None] = {}
    grew = True
    while grew:
        grew = False
        for module, name, bases in classes:
            # yaml.MarkedYAMLError and the like: a library's error class named as such
            if (module, name) not in found and any(b in known or b.endswith(("Error", "Exception")) for b in bases):
                found[(module, name)] = None
                known.add(name)
                grew = True
    return list(found)


def test_the_walk_finds_the_exception_classes() -> None:
    found = {f"{module}.{name}" for module, name in _exception_classes()}
    assert "remediator.errors.ActionError" in found
    assert "remediator.sidecar.nvml.NvmlError" in found  # kept beside NVML's code table, under the root
    assert "remediator.definitions.yaml_budget.NodeBudgetExceeded" in found  # a yaml error too
    assert found >= NOT_UNDER_ROOT


def test_every_exception_class_is_under_the_root() -> None:
    outside = []
    for module, name in _exception_classes():
        cls = getattr(importlib.import_module(module), name)
        if not issubclass(cls, RemediatorError) and f"{module}.{name}" not in NOT_UNDER_ROOT:
            outside.append(f"{module}.{name}")
    assert outside == [], f"exception classes outside remediator.errors' root: {outside}"


def test_no_two_exception_classes_share_a_name() -> None:
    seen: dict[str, str] = {}
    twice = []
    for module, name in _exception_classes():
        if name in seen:
            twice.append(f"{name}: {seen[name]} and {module}")
        seen[name] = module
    assert twice == []


def _is_broad(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in ("Exception", "BaseException") for t in types)


def test_every_broad_except_says_why() -> None:
    silent = []
    for _, path, tree in _modules():
        where = path.relative_to(PACKAGE).as_posix()
        lines = path.read_text().splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and _is_broad(node):
                line, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
                if "#" not in line and not above.startswith("#"):
                    silent.append(f"{where}:{node.lineno}: {line.strip()}")
    assert silent == [], "broad excepts without a comment saying why:\n" + "\n".join(silent)


def test_only_retrying_imports_tenacity() -> None:
    importers = []
    for module, _, tree in _modules():
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            if any(n == "tenacity" or n.startswith("tenacity.") for n in names) and module != "remediator.retrying":
                importers.append(module)
    assert importers == []


def test_the_checks_can_fail() -> None:
    """The broad-except and tenacity checks see what they look for (a check that finds nothing proves nothing)."""
    tree = ast.parse("try:\n    pass\nexcept (ValueError, Exception):\n    pass\nexcept:\n    pass\n")
    handlers = [n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler)]
    assert [_is_broad(h) for h in handlers] == [True, True]
    assert not _is_broad(ast.parse("try:\n    pass\nexcept ValueError:\n    pass\n").body[0].handlers[0])  # type: ignore[attr-defined]
