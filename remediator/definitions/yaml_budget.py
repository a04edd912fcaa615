"""A node budget for YAML documents, so a few hundred bytes of aliases cannot expand into billions of nodes.

YAML aliases (`*a`) repeat an anchored node without copying its text: nine nested levels of nine aliases
("billion laughs") are 250 bytes that every consumer walking the data sees as 9**9 nodes. The composer here
counts, while it reads, how many nodes the document expands to (an alias counts the full size of the node it
repeats, computed once per node), and stops at the budget with an error at the alias's line. Definition
files are a few thousand nodes; the budget is two orders of magnitude above the bundled set's largest file.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import yaml

from remediator.errors import RemediatorError

__all__ = ["MAX_NODES", "NodeBudget", "NodeBudgetExceeded"]

MAX_NODES = 100_000


class NodeBudgetExceeded(RemediatorError, yaml.MarkedYAMLError):
    """The document expands (through aliases) to more nodes than the budget allows."""


def _mark(event: yaml.Event) -> yaml.error.Mark | None:
    """Where the event is, as the error takes it (the pure-Python parser's Mark; the C one has the same fields)."""
    return cast("yaml.error.Mark | None", event.start_mark)


class _Parsing(Protocol):
    """The Parser method the composer reads events with (the class this mixin is combined with has it)."""

    def peek_event(self) -> yaml.Event: ...


class NodeBudget(yaml.composer.Composer):
    """Composer mixin: counts the expanded size of the document and refuses it past `max_nodes`."""

    max_nodes = MAX_NODES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._expanded = 0
        self._sizes: dict[int, int] = {}
        self._open: set[str] = set()  # anchors whose node is still being composed

    def compose_document(self) -> yaml.Node | None:
        self._expanded = 0
        self._sizes = {}
        self._open = set()
        return super().compose_document()

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = cast(_Parsing, self).peek_event()  # from the Parser this mixin is combined with
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:  # an alias inside its own anchor: infinite expansion
                raise NodeBudgetExceeded(
                    None, None, f"recursive alias *{event.anchor}: a node that contains itself",
                    _mark(event),
                )
            target = self.anchors.get(event.anchor)
            grow = self._size(target, event) if target is not None else 1
        else:
            grow = 1
        self._expanded += grow
        if self._expanded > self.max_nodes:
            what = f"alias *{event.anchor}" if isinstance(event, yaml.AliasEvent) else "document"
            raise NodeBudgetExceeded(
                None, None,
                f"{what} expands the document beyond {self.max_nodes} nodes (aliases repeating aliases?)",
                _mark(event),
            )
        anchor = getattr(event, "anchor", None) if not isinstance(event, yaml.AliasEvent) else None
        if anchor is None:
            return super().compose_node(parent, index)
        self._open.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open.discard(anchor)

    def _size(self, node: yaml.Node, event: yaml.Event) -> int:
        """Expanded size of an already composed node (memoised by identity; no recursion on deep input)."""
        sizes = self._sizes
        stack: list[tuple[yaml.Node, bool]] = [(node, False)]
        pending: set[int] = set()
        while stack:
            current, children_done = stack.pop()
            key = id(current)
            if key in sizes:
                continue
            children: list[yaml.Node] = []
            if isinstance(current, yaml.SequenceNode):
                children = list(current.value)
            elif isinstance(current, yaml.MappingNode):
                children = [part for pair in current.value for part in pair]
            if children_done:
                total = 1 + sum(sizes.get(id(c), self.max_nodes + 1) for c in children)
                sizes[key] = min(total, self.max_nodes + 1)
                pending.discard(key)
                continue
            if key in pending:  # an alias inside its own anchor: infinite expansion
                raise NodeBudgetExceeded(
                    None, None, "recursive alias: a node that contains itself", _mark(event)
                )
            pending.add(key)
            stack.append((current, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
        return sizes[id(node)]
