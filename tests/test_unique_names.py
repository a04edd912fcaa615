"""No two types with one name: a class or a type alias is defined in one module of remediator/ only.

Two things with one name (`Event` the state machine's and `Event` the action that writes a Kubernetes Event,
`Decision` the decision about an alert and `Decision` a person's approval) make a reader check the import to
know which one a line means. This walks every module's top level and fails on a public class or CamelCase type
alias defined in more than one module, except the few pairs listed in KNOWN with the reason they stay.
The migrations are left out (frozen history). Exception classes have their own walk (test_error_vocabulary.py).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "remediator"

# name -> why its copies stay (each is one module's own small alias or view, never imported beside the other).
KNOWN: dict[str, str] = {
    "Answer": "adapters/sidecar.py's TypeVar and api/routes/alerts.py's private tuple of a webhook answer",
    "Finished": "sidecar/bounded.py's ended child process (the node agent) and store/decision_store.py's alert "
                "that starts nothing",
    "Labels": "intake/models.py's validated webhook labels and store/models.py's stored labels",
    "Params": "definitions/models.py's step parameters and store/sqlite_intake.py's SQL parameters",
    "Said": "engine/pause_control.py's confirmation and engine/storm_notices.py's last-told fingerprint",
    "Ts": "two SQLite intake modules' private timestamp column type",
}


def type_names(source: str) -> list[str]:
    """The public classes and CamelCase type aliases defined at the top level of `source`."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.extend(t.id for t in targets if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper())
    return [n for n in names if not n.startswith("_")]


def test_type_names_finds_classes_and_aliases() -> None:
    source = "class Node: ...\nclass _Private: ...\nAlias = int\nTyped: type = str\nMAX = 3\nT = 1\nlower = 1\n"
    assert type_names(source) == ["Node", "Alias", "Typed"]


def test_no_two_types_share_a_name() -> None:
    where: defaultdict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for name in type_names(path.read_text(encoding="utf-8")):
            where[name].append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in where.items() if len(set(paths)) > 1 and name not in KNOWN}
    assert shared == {}, "give each its own name (or say in KNOWN why both stay):\n" + "\n".join(
        f"{name}: {', '.join(paths)}" for name, paths in sorted(shared.items())
    )
