"""Text from outside made safe to print on a terminal.

Alert labels and annotations, pod names, a controller's messages and error bodies can hold ESC, BEL, CR,
backspace, DEL, C1 controls (0x80-0x9f, 0x9b is a one-byte CSI) or Unicode bidi controls: printed raw they
clear the screen, retitle the terminal, hide or reorder text (a label that makes `describe` lie). `printable`
shows each such character escaped instead (`\\x1b`, `\\u202e`, `\\n`), so what is printed is what was sent.
Newlines and tabs are escaped too: a label must not add a line to `describe` or break a table's columns.
It is applied to the data before it is laid out, at the one place each command prints (cli/operator.py `_show`
and `_stderr`, cli.py `_report`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar, overload

__all__ = ["UNSAFE", "printable"]

# C0 controls, DEL, C1 controls; the bidi marks, embeddings, overrides and isolates (the "Trojan Source" set:
# U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069); the Unicode line and paragraph separators.
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_T = TypeVar("_T")


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


@overload
def printable(value: str) -> str: ...
@overload
def printable(value: _T) -> _T: ...
def printable(value: Any) -> Any:
    """`value` with every string in it (mapping keys too, through dicts, lists, tuples and dataclass instances)
    terminal-safe; anything else (numbers, None, timestamps, paths) as it is."""
    if isinstance(value, str):
        return UNSAFE.sub(_escaped, value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(printable(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: printable(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value
