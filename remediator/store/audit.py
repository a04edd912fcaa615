"""Hash chain of the audit log: each event stores the hash of its predecessor and of its own canonical JSON.

Editing an event changes its hash; deleting or reordering events breaks the `prev_hash` links. Verification
walks the chain in id order and names the first event that does not fit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["GENESIS", "ChainProblem", "canonical", "event_hash", "verify_chain"]

GENESIS = "0" * 64


def canonical(value: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _ts(ts: datetime) -> str:
    return ts.isoformat(timespec="microseconds").replace("+00:00", "Z")


def event_hash(
    *, ts: datetime, remediation_id: str | None, kind: str, actor: str, data: Mapping[str, Any], prev_hash: str
) -> str:
    body = {
        "ts": _ts(ts if ts.tzinfo is None else ts.replace(tzinfo=None)),
        "remediation_id": remediation_id,
        "kind": kind,
        "actor": actor,
        "data": data,
        "prev_hash": prev_hash,
    }
    return hashlib.sha256(canonical(body).encode()).hexdigest()


@dataclass(frozen=True)
class ChainProblem:
    event_id: int
    reason: str


def verify_chain(events: Iterable[Any]) -> ChainProblem | None:
    """Rows with id, ts, remediation_id, kind, actor, data, prev_hash, hash in id order -> first problem."""
    prev = GENESIS
    for row in events:
        if row.prev_hash != prev:
            return ChainProblem(row.id, "prev_hash does not match the previous event (deleted or reordered)")
        expected = event_hash(
            ts=row.ts, remediation_id=row.remediation_id, kind=row.kind, actor=row.actor, data=row.data,
            prev_hash=row.prev_hash,
        )
        if expected != row.hash:
            return ChainProblem(row.id, "content does not match its hash (edited)")
        prev = row.hash
    return None
