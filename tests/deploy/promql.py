"""Metric names referenced by a PromQL expression (enough of PromQL for the shipped rules and dashboard)."""

from __future__ import annotations

import re

KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_IDENT = re.compile(r"(?<![\w.:])[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    text = _STRING.sub('""', expr)
    text = _VARIABLE.sub("", text)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        token = match.group(0)
        if token.lower() in KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(token)
    return names


def grouping_labels(expr: str) -> list[tuple[str, list[str]]]:
    """Each `by (...)` / `without (...)` clause as (keyword, labels)."""
    return [
        (m.group(1), [label.strip() for label in m.group(2).split(",") if label.strip()])
        for m in re.finditer(r"\b(by|without)\s*\(([^()]*)\)", _STRING.sub('""', expr))
    ]
