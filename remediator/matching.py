"""Which rules an alert matches: Alertmanager matcher semantics over its labels, highest priority first.

Pure: labels and typed rules in, matches out. A missing label equals the empty string and regexes are
anchored (see remediator.definitions.matchers). Rules arrive already ordered by the loader (priority
descending, then file order); the order is kept here so the first match is the one to act on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remediator.definitions.models import Rule

__all__ = ["Match", "match_rules"]


@dataclass(frozen=True)
class Match:
    """A rule that matched, with the rule's params (the playbook's defaults are merged by the caller
    that holds the playbook: `{**playbook.params, **match.params}`)."""

    rule: Rule
    params: dict[str, Any] = field(default_factory=dict)


def match_rules(labels: Mapping[str, str], rules: Iterable[Rule]) -> list[Match]:
    """Enabled rules whose every matcher holds, in priority order (stable for equal priorities)."""
    found = [Match(rule, dict(rule.params)) for rule in rules if rule.enabled and rule.matches(labels)]
    return sorted(found, key=lambda m: -m.rule.priority)
