"""Scoped, timed pauses: which remediations a pause holds, and the label selector it may name (pure).

The kill switch (`POST /api/v1/pause`) stops every step everywhere. A pause here holds only its scope: every
remediation (`all`), those on some nodes (by name, or by a Kubernetes equality-based label selector read from
the node as it is when the step is about to run), or those of some playbooks; a scope naming nodes and
playbooks holds what matches both. It has an author, a reason, and optionally an end: past it, it holds
nothing, without anyone acting (the engine compares with the store's clock). Several may hold at once; a
remediation held by one names it (who, why, until when) in its state reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from remediator.errors import SelectorError

__all__ = ["ActivePause", "Term", "held_by", "parse_selector", "scope_text"]

_KEY = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,251}[A-Za-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Term:
    """One requirement of an equality-based selector: `key=value`, `key!=value`, `key` or `!key`."""

    key: str
    op: str  # "=", "!=", "exists", "!exists"
    value: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "=":
            return labels.get(self.key) == self.value
        return labels.get(self.key) != self.value


def parse_selector(text: str) -> tuple[Term, ...]:
    """`k=v,k2!=v2,k3,!k4` (`==` is `=`) -> terms; SelectorError naming the bad part."""
    terms: list[Term] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise SelectorError(f"empty requirement in label selector {text!r}")
        if "!=" in part:
            key, value = (s.strip() for s in part.split("!=", 1))
            op = "!="
        elif "=" in part:
            key, value = (s.strip() for s in part.replace("==", "=", 1).split("=", 1))
            op = "="
        elif part.startswith("!"):
            key, value, op = part[1:].strip(), "", "!exists"
        else:
            key, value, op = part, "", "exists"
        if not _KEY.fullmatch(key):
            raise SelectorError(f"invalid label key {key!r} in label selector {text!r}")
        if not _VALUE.fullmatch(value):
            raise SelectorError(f"invalid label value {value!r} in label selector {text!r} (at most 63 of "
                                "[A-Za-z0-9_.-], starting and ending with a letter or digit; set-based "
                                "selectors (in, notin) are not accepted)")
        terms.append(Term(key, op, value))
    return tuple(terms)


@dataclass(frozen=True)
class ActivePause:
    """A pause as the engine reads it: its scope, who, why, until when."""

    id: str
    created_by: str
    reason: str
    nodes: tuple[str, ...] = ()
    selector: str | None = None
    playbooks: tuple[str, ...] = ()
    ends_at: datetime | None = None

    @property
    def everything(self) -> bool:
        return not self.nodes and not self.selector and not self.playbooks

    @property
    def needs_labels(self) -> bool:
        return bool(self.selector)

    def holds(self, node: str | None, labels: Mapping[str, str] | None, playbook: str) -> bool:
        """Does this pause hold a remediation of `playbook` on `node` (with those labels)?"""
        if self.everything:
            return True
        if self.playbooks and playbook not in self.playbooks:
            return False
        if not self.nodes and not self.selector:
            return True  # playbooks only
        if node is not None and node in self.nodes:
            return True
        if self.selector and node is not None and labels is not None:
            return all(term.matches(labels) for term in parse_selector(self.selector))
        return False

    def describe(self) -> str:
        until = f" until {self.ends_at.isoformat()}" if self.ends_at else ""
        return f"paused by {self.created_by}: {self.reason} (pause {self.id}, {scope_text(self)}{until})"


def scope_text(pause: ActivePause) -> str:
    """The scope in a few words: `all`, `nodes gpu-1, gpu-2`, `selector pool=a`, `playbooks reset-gpu`."""
    if pause.everything:
        return "all"
    parts = []
    if pause.nodes:
        parts.append("nodes " + ", ".join(pause.nodes))
    if pause.selector:
        parts.append(f"selector {pause.selector}")
    if pause.playbooks:
        parts.append("playbooks " + ", ".join(pause.playbooks))
    return "; ".join(parts)


def held_by(
    pauses: Sequence[ActivePause], node: str | None, labels: Mapping[str, str] | None, playbook: str
) -> ActivePause | None:
    """The first (oldest) of `pauses` that holds this remediation, or None."""
    return next((p for p in pauses if p.holds(node, labels, playbook)), None)
