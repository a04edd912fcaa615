"""YAML with line numbers: every definition problem must name `file:line`, so the loader keeps, next to
the plain data, the line of every node it read, addressed by its path inside the document.

A path is a tuple of mapping keys and list indexes, shown as `rules[2].playbook`. Asking for the line of a
path that is not in the document (a missing field) answers with the line of its nearest present parent.
Booleans are YAML 1.2's (`true`/`false` only), so an old `on: pods` in an event step is still the string
key "on" here (other YAML 1.1 tools read it as `true: pods`, which is why the key is now `object`).
Aliases count against a node budget (definitions/yaml_budget.py): an alias bomb is a problem at its line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from remediator.definitions.yaml_budget import NodeBudget, NodeBudgetExceeded
from remediator.errors import DefinitionError

__all__ = ["Document", "Path", "Problems", "format_path", "parse_yaml"]

_BOOL_TAG = "tag:yaml.org,2002:bool"


class _Loader(NodeBudget, yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (yes/no/on/off stay strings) and a budget of expanded nodes."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))

Path = tuple[str | int, ...]


def format_path(path: Sequence[str | int]) -> str:
    """`("rules", 2, "playbook")` -> `rules[2].playbook`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = str(part)
    return out


@dataclass(frozen=True)
class Document:
    """One parsed YAML file: its data and the 1-based line of every node, by path."""

    file: str
    text: str
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line(self, path: Sequence[str | int]) -> int:
        """Line of the node at `path`, or of its nearest parent present in the file."""
        key = tuple(path)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get((), 1)


class Problems:
    """Collects every DefinitionError of one load, so the caller sees all of them at once.

    `warnings` (deprecated spellings that still work, definitions that work but not as they read) are located
    the same way but fail nothing.
    """

    def __init__(self) -> None:
        self.errors: list[DefinitionError] = []
        self.warnings: list[DefinitionError] = []

    def warn(self, doc: Document, path: Sequence[str | int], message: str) -> None:
        self.warnings.append(DefinitionError(doc.file, doc.line(path), message, format_path(path)))

    def add(self, doc: Document, path: Sequence[str | int], message: str) -> None:
        self.errors.append(DefinitionError(doc.file, doc.line(path), message, format_path(path)))

    def add_at(self, file: str, line: int, message: str, path: str = "") -> None:
        self.errors.append(DefinitionError(file, line, message, path))

    def __bool__(self) -> bool:
        return bool(self.errors)

    def __len__(self) -> int:
        return len(self.errors)


def _walk(
    loader: _Loader, node: yaml.Node, path: Path, lines: dict[Path, int], dup: list[tuple[Path, int]]
) -> None:
    block = isinstance(node, yaml.ScalarNode) and node.style in ("|", ">")
    lines[path] = node.start_mark.line + (2 if block else 1)  # a block scalar's text starts below its `|`
    if isinstance(node, yaml.MappingNode):
        seen: set[object] = set()
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str | int) or isinstance(key, bool):
                key = str(key)
            if key in seen:
                dup.append(((*path, key), key_node.start_mark.line + 1))
            seen.add(key)
            _walk(loader, value_node, (*path, key), lines, dup)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(loader, item, (*path, index), lines, dup)


def parse_yaml(text: str, file: str, problems: Problems) -> Document | None:
    """Parse one YAML document; on a syntax error or a duplicate key, record it and return None."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return Document(file=file, text=text, data=None, lines={(): 1})
        data = loader.construct_document(node)
        lines: dict[Path, int] = {}
        dup: list[tuple[Path, int]] = []
        _walk(loader, node, (), lines, dup)
    except NodeBudgetExceeded as exc:
        problems.add_at(file, exc.problem_mark.line + 1 if exc.problem_mark else 0, str(exc.problem))
        return None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        problems.add_at(file, line, f"YAML syntax error: {exc.problem or exc.context or exc}")
        return None
    except yaml.YAMLError as exc:
        problems.add_at(file, 0, f"YAML error: {exc}")
        return None
    finally:
        loader.dispose()
    for dup_path, line in dup:
        problems.add_at(file, line, f"duplicate key {dup_path[-1]!r}", format_path(dup_path))
    if dup:
        return None
    return Document(file=file, text=text, data=data, lines=lines)
