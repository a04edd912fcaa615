"""Which rules an alert matches: Alertmanager matcher semantics over its labels, highest priority first.

Pure: labels and typed rules in, matches out. A missing label equals the empty string and regexes are
anchored (see remediator.definitions.matchers). Rules arrive already ordered by the loader (priority
descending, then file order); the order is kept here so the first match is the one to act on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from remediator.definitions.models import Rule

__all__ = ["Match", "RuleIndex", "match_rules"]


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


_Compiled = tuple[Rule, tuple[Callable[[Mapping[str, str]], bool], ...]]  # a rule and its matchers' predicates


class RuleIndex:
    """`match_rules` for one rule set, made for deciding thousands of alerts against it.

    A rule with an `alertname="X"` matcher matches only alerts named X (every matcher must hold), so it is
    tried only for those; a rule without one is tried for every alert. Each list keeps the rules' order, so
    `match` finds what `match_rules` over all the rules finds. With the shipped 23 rules an Xid alert is
    tried against 4. Disabled rules are left out, and each matcher is tried as a plain function
    (`Matcher.predicate`) rather than through the model's attributes.
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        def compiled(subset: Iterable[Rule]) -> tuple[_Compiled, ...]:
            return tuple((rule, tuple(m.predicate() for m in rule.match)) for rule in subset if rule.enabled)

        self._any = compiled(rule for rule in rules if not rule.equality_alertnames())
        names = {name for rule in rules for name in rule.equality_alertnames()[:1]}
        self._by_name = {
            name: compiled(rule for rule in rules if rule.equality_alertnames()[:1] in ([], [name])) for name in names
        }

    def match(self, labels: Mapping[str, str]) -> list[Match]:
        """What `match_rules(labels, rules)` returns."""
        candidates = self._by_name.get(labels.get("alertname", ""), self._any)
        found = [Match(rule, dict(rule.params)) for rule, tests in candidates if all(t(labels) for t in tests)]
        return sorted(found, key=lambda m: -m.rule.priority)
