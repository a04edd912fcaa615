"""A remediation's state is compared through the `State` enum, never a string literal.

A literal such as `rem.state == "held"` still works (State is a StrEnum), but a misspelt one (`"reverted "`,
`"awaiting-approval"`) is silently never true, and a renamed state leaves it behind. This walks every module of
remediator/ and fails on a comparison whose one side is a name or attribute ending in `state` and whose other side
is a string (or a tuple, list or set of strings, or a conditional choosing between them) naming a State value.
The migrations are left out: a migration is frozen history and must not follow the enum as it changes.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

from remediator.domain.states import State

ROOT = Path(__file__).resolve().parents[2] / "remediator"
VALUES = frozenset(s.value for s in State)


def _names_state(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr.endswith("state")
    if isinstance(node, ast.Name):
        return node.id.endswith("state")
    return False


def _strings(node: ast.expr) -> list[str]:
    """The string constants `node` compares against (empty when it is anything else)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


def state_literals(source: str) -> list[str]:
    """Each comparison in `source` of a state with a literal naming a State value, as `line: code`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for a, b in itertools.pairwise(sides):
            if any(_names_state(x) and VALUES.intersection(_strings(y)) for x, y in ((a, b), (b, a))):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
                break
    return found


def test_the_scan_finds_a_literal_and_passes_the_enum() -> None:
    assert state_literals('if rem.state == "held":\n    pass\n') == ["1: rem.state == 'held'"]
    assert state_literals('ok = state in ("pending", "running")\n')
    assert state_literals('ok = rem.state not in (("pending",) if f else ("reverting",))\n')
    assert state_literals('ok = "reverting" != row.state\n')
    assert state_literals("ok = rem.state == State.HELD\n") == []
    assert state_literals('ok = alert.state == "new"\n') == []  # not a remediation state
    assert state_literals('ok = rem.status == "failed"\n') == []  # not a state


def test_no_state_is_compared_with_a_string_literal() -> None:
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{hit}"
        for path in sorted(ROOT.rglob("*.py"))
        if "migrations" not in path.parts
        for hit in state_literals(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "compare states through remediator.domain.states.State:\n" + "\n".join(offenders)
