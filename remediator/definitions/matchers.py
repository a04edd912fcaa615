"""Alertmanager label matchers (`alertname="GPUXidError"`, `xid=~"79|48"`, `!=`, `!~`), parsed once at load.

Semantics follow Alertmanager so a rule reads exactly like a route or a silence: a missing label equals the
empty string, and regular expressions are fully anchored (`xid=~"7"` does not match `79`). Quoted values
take the escapes `\\\\`, `\\"` and `\\n`; any other backslash is kept as written, so `\\d` reaches the regex.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

__all__ = ["MatchOp", "Matcher", "parse_matcher"]

MatchOp = Literal["=", "!=", "=~", "!~"]

_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_MATCHER = re.compile(rf"^\s*(?P<name>{_LABEL})\s*(?P<op>=~|!~|!=|=)\s*(?P<value>.*?)\s*$", re.DOTALL)
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class Matcher(BaseModel):
    """One `name op value` condition on an alert's labels."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    op: MatchOp
    value: str
    _regex: re.Pattern[str] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _compile(self) -> Matcher:
        if not re.fullmatch(_LABEL, self.name):
            raise ValueError(f"invalid label name {self.name!r}")
        if self.op in ("=~", "!~"):
            try:
                self._regex = re.compile(f"(?:{self.value})", re.DOTALL)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {self.value!r}: {exc}") from None
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Alertmanager semantics: a missing label is the empty string; regexes are anchored."""
        value = labels.get(self.name, "")
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        assert self._regex is not None
        found = self._regex.fullmatch(value) is not None
        return found if self.op == "=~" else not found

    def predicate(self) -> Callable[[Mapping[str, str]], bool]:
        """`matches` as a plain function over the labels, for hot loops (rules tried for every alert of a
        storm): no model attribute lookups per call."""
        name, value = self.name, self.value
        if self.op == "=":
            return lambda labels: labels.get(name, "") == value
        if self.op == "!=":
            return lambda labels: labels.get(name, "") != value
        assert self._regex is not None
        fullmatch = self._regex.fullmatch
        if self.op == "=~":
            return lambda labels: fullmatch(labels.get(name, "")) is not None
        return lambda labels: fullmatch(labels.get(name, "")) is None

    def __str__(self) -> str:
        quoted = self.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{self.name}{self.op}"{quoted}"'


def _unquote(text: str) -> str:
    if len(text) < 2 or not (text.startswith('"') and text.endswith('"')):
        raise ValueError(f"unterminated quoted value {text!r}")
    body = text[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        if ch == '"':
            raise ValueError(f"unescaped quote inside value {text!r}")
        out.append(ch)
        i += 1
    return "".join(out)


def parse_matcher(raw: object) -> Matcher:
    """`'xid=~"79|48"'` -> Matcher(name='xid', op='=~', value='79|48'). Raises ValueError."""
    if isinstance(raw, Matcher):
        return raw
    if not isinstance(raw, str):
        raise ValueError(f'a matcher is a string like alertname="GPUXidError", not {type(raw).__name__}')
    m = _MATCHER.match(raw)
    if m is None:
        raise ValueError(f"cannot parse matcher {raw!r} (use name=value, name!=value, name=~re, name!~re)")
    value = m.group("value")
    if value.startswith('"'):
        value = _unquote(value)
    elif '"' in value:
        raise ValueError(f"stray quote in unquoted value {value!r}")
    op: MatchOp = m.group("op")  # type: ignore[assignment]
    return Matcher(name=m.group("name"), op=op, value=value)
