"""Which modules one alert passes through, and how often the engine and the store call each other on the way.

A profile hook (sys.setprofile) sees every Python call in the event loop's thread; a coroutine resumed after
an await is not a new call (its frame's first instruction offset tells a first entry from a resume). Calls are
counted by module pair, so the walk-through in docs/architecture.md can name the files an alert passes through
and count the crossings between engine/ and store/ from a measurement, not from reading the code.
"""

from __future__ import annotations

import dis
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

PACKAGE = Path(__file__).resolve().parents[2] / "remediator"


def _first_resume(code: CodeType) -> int:
    for ins in dis.get_instructions(code):
        if ins.opname == "RESUME":
            return ins.offset
    return 0


@dataclass
class Walk:
    """Calls between remediator modules, recorded while `active`."""

    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    edges: set[tuple[str, str, str, str]] = field(default_factory=set)
    modules: set[str] = field(default_factory=set)
    _resume: dict[CodeType, int] = field(default_factory=dict)

    def _module(self, code: CodeType) -> str | None:
        name = code.co_filename
        if not name.startswith(str(PACKAGE)):
            return None
        return str(Path(name).relative_to(PACKAGE.parent))

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        start = self._resume.get(code)
        if start is None:
            start = self._resume[code] = _first_resume(code)
        if frame.f_lasti > start:  # a coroutine or generator resumed, not called
            return
        callee = self._module(code)
        caller_frame = frame.f_back
        if callee is None or caller_frame is None:
            return
        caller = self._module(caller_frame.f_code)
        self.modules.add(callee)
        if caller is None or caller == callee:
            return
        self.calls[(caller, callee)] += 1
        self.edges.add((caller, caller_frame.f_code.co_name, callee, code.co_name))

    def __enter__(self) -> Walk:
        sys.setprofile(self.profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)

    def crossings(self, source: str, target: str) -> tuple[int, int]:
        """(calls, distinct caller->callee function pairs) from package `source` into package `target`."""
        calls = sum(n for (a, b), n in self.calls.items()
                    if a.startswith(f"remediator/{source}/") and b.startswith(f"remediator/{target}/"))
        edges = sum(1 for (a, _, b, _) in self.edges
                    if a.startswith(f"remediator/{source}/") and b.startswith(f"remediator/{target}/"))
        return calls, edges
