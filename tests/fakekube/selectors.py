"""labelSelector and fieldSelector parsing and matching with the apiserver's grammar and field tables.

Lists in the fake honour selectors exactly, and reject what a real apiserver rejects (unknown fields,
malformed requirements), so code that filters by a selector the server cannot evaluate fails here too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.fakekube.validation import label_value_problem, qualified_name_problem

__all__ = [
    "FieldRequirement",
    "LabelRequirement",
    "SelectorError",
    "label_selector_from_object",
    "parse_field_selector",
    "parse_label_selector",
]

# Fields each resource supports in fieldSelector (from the apiserver's registries).
FIELDS: dict[str, tuple[str, ...]] = {
    "pods": (
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "nodes": ("metadata.name", "spec.unschedulable"),
    "events": (
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
}
DEFAULT_FIELDS = ("metadata.name", "metadata.namespace")


class SelectorError(ValueError):
    """The selector cannot be parsed or names a field the resource does not index (answered as 400)."""


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    negate: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        actual = _field_value(obj, self.field)
        return (actual != self.value) if self.negate else (actual == self.value)


def _split_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unable to parse requirement: unbalanced parentheses in {text!r}")
    terms.append("".join(current))
    return [t.strip() for t in terms]


_SET = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ = re.compile(r"^(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_EXISTS = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)$")


def _checked_key(key: str) -> str:
    problem = qualified_name_problem(key)
    if problem:
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r}: {problem}")
    return key


def _checked_value(value: str) -> str:
    problem = label_value_problem(value)
    if problem:
        raise SelectorError(f"unable to parse requirement: invalid label value: {value!r}: {problem}")
    return value


def _parse_label_term(term: str) -> LabelRequirement:
    if m := _SET.match(term):
        values = [v.strip() for v in m["values"].split(",")]
        if values == [""]:
            raise SelectorError(
                f"unable to parse requirement: {term!r}: "
                "for 'in', 'notin' operators, values set can't be empty"
            )
        return LabelRequirement(_checked_key(m["key"]), m["op"], frozenset(_checked_value(v) for v in values))
    if m := _EQ.match(term):
        op = "!=" if m["op"] == "!=" else "="
        return LabelRequirement(_checked_key(m["key"]), op, frozenset({_checked_value(m["value"])}))
    if m := _EXISTS.match(term):
        return LabelRequirement(_checked_key(m["key"]), "!exists" if m["neg"] else "exists")
    raise SelectorError(f"unable to parse requirement: found {term!r}, expected a label requirement")


def parse_label_selector(text: str | None) -> list[LabelRequirement]:
    """`a=b,c!=d,e in (f,g),h notin (i),j,!k` -> requirements; every one must match (AND)."""
    if text is None or not text.strip():
        return []
    terms = _split_terms(text)
    if any(not t for t in terms):
        raise SelectorError(f"unable to parse requirement: empty term in {text!r}")
    return [_parse_label_term(t) for t in terms]


def _split_field_terms(text: str) -> list[str]:
    """Split on commas not escaped by a backslash (apimachinery fields.splitTerms)."""
    terms, start, escaped = [], 0, False
    for i, c in enumerate(text):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_field_term(term: str) -> tuple[str, str, str] | None:
    """(field, operator, raw value) at the first `!=`, `==` or `=` (apimachinery fields.splitTerm)."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
    return None


def _unescape_field_value(value: str) -> str:
    """Only `\\\\`, `\\,` and `\\=` are escapes; a bare `,` or `=` is refused (fields.UnescapeValue)."""
    out, escaped = [], False
    for c in value:
        if escaped:
            if c not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{c}")
            out.append(c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in ",=":
            raise SelectorError(f"invalid field selector: unescaped character {c!r} in a value")
        else:
            out.append(c)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_selector(text: str | None, plural: str) -> list[FieldRequirement]:
    """`spec.nodeName=n1,status.phase!=Succeeded` -> requirements; unknown fields are an error.

    The apiserver's grammar: terms split on unescaped commas, each at its first operator, values
    unescaped (`\\\\`, `\\,`, `\\=`) and refused with any other escape or a bare `,`/`=`; no trimming.
    """
    if text is None or not text:
        return []
    supported = FIELDS.get(plural, DEFAULT_FIELDS)
    requirements = []
    for term in _split_field_terms(text):
        if not term:
            continue
        parts = _split_field_term(term)
        if parts is None:
            raise SelectorError(f"invalid selector: {term!r}; can't understand")
        field, op, raw = parts
        value = _unescape_field_value(raw)
        if field not in supported:
            only = ", ".join(f'"{f}"' for f in supported)
            raise SelectorError(f'"{field}" is not a known field selector: only {only}')
        requirements.append(FieldRequirement(field, value, op == "!="))
    return requirements


def _field_value(obj: Mapping[str, Any], field: str) -> str:
    current: Any = obj
    for part in field.split("."):
        current = current.get(part) if isinstance(current, Mapping) else None
    if current is None:
        return "false" if field in ("spec.unschedulable", "spec.hostNetwork") else ""
    if isinstance(current, bool):
        return "true" if current else "false"
    if isinstance(current, Mapping):  # events' "source" selects on source.component
        return str(current.get("component", ""))
    return str(current)


def label_selector_from_object(selector: Mapping[str, Any] | None) -> list[LabelRequirement] | None:
    """A metav1.LabelSelector (matchLabels + matchExpressions) -> requirements; None selects nothing."""
    if selector is None:
        return None
    requirements = [
        LabelRequirement(k, "=", frozenset({str(v)})) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(expr.get("operator"))
        if op is None:
            raise SelectorError(f"{expr.get('operator')!r} is not a valid label selector operator")
        requirements.append(LabelRequirement(expr["key"], op, frozenset(expr.get("values") or [])))
    return requirements
