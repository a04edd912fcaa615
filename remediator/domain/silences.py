"""Silences in Alertmanager's model: matchers, their validation, amtool's matcher syntax, and matching.

An operator who wants one node or one alert left alone for two hours needs neither a rule edit nor a label
with no expiry: a silence names the alerts it holds with matchers (`name`, `value`, `isRegex`, `isEqual`, as
Alertmanager's v2 API writes them), a start, an end, its author and a comment. The controller stores it
(store/silence_store.py), checks it for every firing alert it decides (engine/worker.py) and records an alert
it holds as `silenced`, starting nothing. Expiry is by time only: a silence whose end has passed stops
matching on its own, and expiring one early sets its end to now.

Pure (no I/O), so the API, the worker and the CLI share one meaning of a matcher. Regular expressions are
RE2, as in Alertmanager (Go's regexp): anchored the way Alertmanager anchors them (`^(?:value)$`), with
RE2's syntax (no backreferences or lookaround) and linear-time matching, so no silence can make a flood of
alerts slow to decide. Each pattern is compiled once (a bounded cache), and a set of silences is compiled
once per decision batch.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import re2  # type: ignore[import-untyped]

from remediator.domain.json_values import JsonObject
from remediator.errors import MatcherError

__all__ = [
    "MAX_COMMENT", "MAX_MATCHERS", "MAX_NAME", "MAX_VALUE", "SILENCED_NOTE", "ActiveSilence", "SilenceMatcher",
    "SilenceSet", "compiled", "matcher_text", "parse_matchers", "silence_id_of", "state_of",
    "validate_matchers",
]

MAX_MATCHERS: Final = 64
MAX_NAME: Final = 256
MAX_VALUE: Final = 1024
MAX_COMMENT: Final = 2000
# The note of an alert a silence held: `silenced by <silence id>` (`silence_id_of` reads it back).
SILENCED_NOTE: Final = "silenced by "

log = logging.getLogger(__name__)

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is answered with a 422, not logged on stderr
# amtool's matcher: a label name, an operator, a value (quoted, or bare to the end of the matcher).
_MATCHER = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$", re.DOTALL)
_OPERATORS: Final = {"=": (True, False), "!=": (False, False), "=~": (True, True), "!~": (False, True)}


@dataclass(frozen=True)
class SilenceMatcher:
    """One label matcher: `isEqual` false negates it, `isRegex` makes `value` an anchored RE2 pattern."""

    name: str
    value: str
    is_regex: bool = False
    is_equal: bool = True

    def as_dict(self) -> JsonObject:
        """As Alertmanager's v2 API writes a matcher."""
        return {"name": self.name, "value": self.value, "isRegex": self.is_regex, "isEqual": self.is_equal}

    @classmethod
    def of(cls, data: Mapping[str, object]) -> SilenceMatcher:
        """From a stored or sent matcher (`isEqual` defaults to true, as in Alertmanager)."""
        return cls(str(data["name"]), str(data["value"]), bool(data.get("isRegex", False)),
                   bool(data.get("isEqual", True)))

    def matches(self, labels: Mapping[str, object]) -> bool:
        """Does the label set match? A missing label reads as the empty string, as in Alertmanager."""
        value = labels.get(self.name)
        text = "" if value is None else str(value)
        hit = compiled(self.value).match(text) is not None if self.is_regex else text == self.value
        return hit == self.is_equal


@functools.lru_cache(maxsize=4096)
def compiled(pattern: str) -> Any:
    """`pattern` anchored as Alertmanager anchors it, compiled with RE2 (cached; raises re2's error)."""
    return re2.compile(f"^(?:{pattern})$", _OPTIONS)


def matcher_text(m: SilenceMatcher) -> str:
    """`name=~"value"`: the matcher as amtool writes it (the value quoted and escaped)."""
    op = {(True, False): "=", (False, False): "!=", (True, True): "=~", (False, True): "!~"}[(m.is_equal, m.is_regex)]
    value = m.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{m.name}{op}"{value}"'


def validate_matchers(matchers: Sequence[SilenceMatcher], field: str = "matchers") -> None:
    """Alertmanager's rules: at least one matcher, names not empty, regexes that compile, and at least one
    matcher that does not match the empty string (no silence may hold every alert)."""
    if not matchers:
        raise MatcherError(field, "at least one matcher is required")
    if len(matchers) > MAX_MATCHERS:
        raise MatcherError(field, f"at most {MAX_MATCHERS} matchers")
    for i, m in enumerate(matchers):
        if not m.name.strip():
            raise MatcherError(f"{field}[{i}].name", "a label name is required")
        if len(m.name) > MAX_NAME:
            raise MatcherError(f"{field}[{i}].name", f"at most {MAX_NAME} characters")
        if len(m.value) > MAX_VALUE:
            raise MatcherError(f"{field}[{i}].value", f"at most {MAX_VALUE} characters")
        if m.is_regex:
            try:
                re2.compile(m.value, _OPTIONS)  # the error names the pattern as it was sent, not as anchored
                compiled(m.value)
            except re2.error as exc:
                reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
                raise MatcherError(f"{field}[{i}].value", f"not a valid RE2 regular expression: {reason}") from None
    if all(m.matches({}) for m in matchers):
        raise MatcherError(field, "at least one matcher must not match the empty string (it would silence every "
                                  "alert without that label)")


def _unquote(raw: str, text: str) -> str:
    """A matcher's value: a bare value as it is; a quoted one with `\\"`, `\\\\` and `\\n` unescaped (any other
    backslash kept, as amtool keeps it)."""
    if not raw.startswith('"'):
        if raw.endswith('"'):
            raise ValueError(f"{text!r}: the value ends with a quote it does not start with")
        return raw
    if len(raw) < 2 or not raw.endswith('"'):
        raise ValueError(f"{text!r}: the value's closing quote is missing")
    out: list[str] = []
    escaped = False
    for char in raw[1:-1]:
        if escaped:
            escaped = False
            out.append({"n": "\n", '"': '"', "\\": "\\"}.get(char, "\\" + char))
        elif char == "\\":
            escaped = True
        elif char == '"':
            raise ValueError(f"{text!r}: an unescaped quote inside the value")
        else:
            out.append(char)
    if escaped:
        raise ValueError(f"{text!r}: the value's closing quote is escaped")
    return "".join(out)


def _split(text: str) -> list[str]:
    """`a="x,y", b=~c` -> [`a="x,y"`, ` b=~c`]: commas outside quotes separate matchers."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_matchers(args: Iterable[str]) -> list[SilenceMatcher]:
    """Matchers as amtool takes them: `alertname=GPUXidError`, `Hostname=~"gpu-node-1[0-9]"`, `xid!=13`,
    `name!~re`, one per argument or several in `{a="b", c!="d"}`; a first argument without an operator is the
    alert name, as in `amtool silence add GPUXidError`. Raises ValueError naming the matcher."""
    out: list[SilenceMatcher] = []
    for n, arg in enumerate(args):
        text = arg.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        for part in _split(text):
            found = _MATCHER.match(part)
            if found is None and n == 0 and not out:
                found = _MATCHER.match(f"alertname={part.strip()}")  # amtool: a bare first argument
            if found is None:
                raise ValueError(f"{part.strip()!r}: not a matcher (name=value, name!=value, name=~regex, name!~regex)")
            name, op, raw = found.groups()
            is_equal, is_regex = _OPERATORS[op]
            out.append(SilenceMatcher(name, _unquote(raw, part.strip()), is_regex, is_equal))
    return out


def silence_id_of(note: str | None) -> str | None:
    """The silence an alert's note names (`silenced by <id>`), or None."""
    if note and note.startswith(SILENCED_NOTE):
        return note[len(SILENCED_NOTE):].strip() or None
    return None


def state_of(starts_at: datetime, ends_at: datetime, now: datetime) -> str:
    """Alertmanager's silence state at `now`: pending (not started), active, or expired (ended)."""
    if ends_at <= now:
        return "expired"
    if starts_at > now:
        return "pending"
    return "active"


@dataclass(frozen=True)
class ActiveSilence:
    """A silence in force, as the decision path reads it."""

    id: str
    matchers: tuple[SilenceMatcher, ...]
    created_by: str
    comment: str
    ends_at: datetime

    def matches(self, labels: Mapping[str, object]) -> bool:
        return all(m.matches(labels) for m in self.matchers)


class SilenceSet:
    """The silences in force for one decision batch (read once), matched against each alert's labels."""

    def __init__(self, silences: Iterable[ActiveSilence] = ()) -> None:
        usable = []
        for s in silences:  # every pattern compiled now, once for the batch
            try:
                for m in s.matchers:
                    if m.is_regex:
                        compiled(m.value)
            except re2.error:
                # Validated when it was created; a pattern this RE2 refuses holds nothing rather than every alert.
                log.error("silence %s has a regular expression RE2 refuses: it matches nothing", s.id)
                continue
            usable.append(s)
        self.silences = tuple(usable)

    def __bool__(self) -> bool:
        return bool(self.silences)

    def match(self, labels: Mapping[str, object]) -> ActiveSilence | None:
        """The first silence (oldest first, as read) holding an alert with these labels, or None."""
        for s in self.silences:
            if s.matches(labels):
                return s
        return None
