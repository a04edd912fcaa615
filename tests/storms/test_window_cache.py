"""The storm guard keeps the window's faults by remediation id (engine/storm_guard.py `_window`): it reads a
row whole only when the row is new to it or its context was stored since, and forgets rows that left the
window; the faults it hands the analysis are those of the rows in the window now."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from remediator.engine.storm_guard import StormGuard

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


@dataclass
class Window:
    """The reads the guard's window uses, over rows kept in memory; counts what it read whole."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    read_whole: list[list[str]] = field(default_factory=list)

    async def window_keys(self, since: datetime) -> list[tuple[str, bool]]:
        return [(rid, bool(row["context"])) for rid, row in self.rows.items()]

    async def window_faults_of(self, ids: Sequence[str]) -> dict[str, Any]:
        self.read_whole.append(sorted(ids))
        return {rid: (self.rows[rid]["node"], "GPUXidError", {"xid": {"code": 79}}, {}, self.rows[rid]["context"],
                      NOW) for rid in ids}


def row(node: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"node": node, "context": context or {}}


async def test_rows_are_read_whole_once_then_again_only_when_their_context_arrives() -> None:
    guard = StormGuard(rt=None)  # type: ignore[arg-type]  # _window reads nothing of the runtime
    window = Window({"a": row("n1"), "b": row("n2")})

    first = await guard._window(NOW, window)  # type: ignore[arg-type]
    assert sorted(f.node for f in first) == ["n1", "n2"] and window.read_whole == [["a", "b"]]

    await guard._window(NOW, window)  # type: ignore[arg-type]
    assert window.read_whole == [["a", "b"]]  # nothing new: only the narrow read

    window.rows["a"] = row("n1", {"pods": [{"namespace": "ml", "owners": [{"kind": "Job", "name": "train"}]}]})
    window.rows["c"] = row("n3")
    third = await guard._window(NOW, window)  # type: ignore[arg-type]
    assert window.read_whole[-1] == ["a", "c"]
    attributes = {f.node: f.attributes for f in third}
    assert ("fault:workload", "ml/Job/train") in attributes["n1"]
    assert ("fault:xid", "79") in attributes["n3"]

    del window.rows["b"]  # out of the window
    fourth = await guard._window(NOW, window)  # type: ignore[arg-type]
    assert sorted(f.node for f in fourth) == ["n1", "n3"] and window.read_whole[-1] == ["a", "c"]
    assert "b" not in guard._faults
