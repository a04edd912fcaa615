"""Hash chain of the audit log: each event stores the hash of its predecessor and of its own canonical JSON.

With an audit key (AUDIT_KEY / AUDIT_KEY_FILE) every hash is an HMAC-SHA256 under that key, which the
database never holds: whoever can write the database can edit rows but cannot compute hashes that verify.
Without a key the hashes are plain SHA-256 and only catch accidents. Editing an event changes its hash;
deleting or reordering events breaks the `prev_hash` links. Deleting the newest events leaves a shorter
chain that is still intact: that is caught by comparing with a head (`seq:hash`) kept elsewhere (an anchor).

Old events can be pruned behind a signed checkpoint (the id and hash of the last event deleted); the chain
then verifies from the checkpoint. Verification walks the chain in id order and names the first event that
does not fit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from remediator.domain.json_values import JsonObject, JsonValue

__all__ = [
    "GENESIS",
    "ChainProblem",
    "ChainReport",
    "ChainedEvent",
    "Checkpoint",
    "canonical",
    "checkpoint_mac",
    "event_hash",
    "verify_chain",
    "walk_chain",
]

GENESIS = "0" * 64


def canonical(value: object) -> str:
    """Deterministic JSON: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _ts(ts: datetime) -> str:
    return ts.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _digest(message: str, key: bytes | None) -> str:
    if key is None:
        return hashlib.sha256(message.encode()).hexdigest()
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def event_hash(
    *, ts: datetime, remediation_id: str | None, kind: str, actor: str, data: Mapping[str, object], prev_hash: str,
    key: bytes | None = None,
) -> str:
    """HMAC-SHA256 under `key` of the event's canonical JSON (plain SHA-256 without a key)."""
    body = {
        "ts": _ts(ts if ts.tzinfo is None else ts.replace(tzinfo=None)),
        "remediation_id": remediation_id,
        "kind": kind,
        "actor": actor,
        "data": data,
        "prev_hash": prev_hash,
    }
    return _digest(canonical(body), key)


def checkpoint_mac(seq: int, hash_at_cut: str, key: bytes | None) -> str:
    """Signature of a prune checkpoint: HMAC-SHA256 under `key` (plain SHA-256 without a key)."""
    return _digest(canonical({"checkpoint": seq, "hash": hash_at_cut}), key)


@dataclass(frozen=True)
class Checkpoint:
    """Where the chain starts after pruning: events up to `seq` are gone; the next one links to `hash`."""

    seq: int
    hash: str
    mac: str

    def as_dict(self) -> JsonObject:
        return {"seq": self.seq, "hash": self.hash, "mac": self.mac}

    @classmethod
    def from_dict(cls, value: Mapping[str, JsonValue]) -> Checkpoint:
        """KeyError, TypeError or ValueError when `value` is not one (an unreadable checkpoint)."""
        seq = value["seq"]
        if not isinstance(seq, int | float | str):
            raise TypeError(f"checkpoint seq {seq!r} is not a number")
        return cls(int(seq), str(value["hash"]), str(value["mac"]))


class ChainedEvent(Protocol):
    """An audit row as the chain reads it: a stored AuditEvent, or one read back from an archive."""

    @property
    def id(self) -> int: ...
    @property
    def ts(self) -> datetime: ...
    @property
    def remediation_id(self) -> str | None: ...
    @property
    def kind(self) -> str: ...
    @property
    def actor(self) -> str: ...
    @property
    def data(self) -> Mapping[str, object]: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...


def _hash_of(row: ChainedEvent, key: bytes | None = None) -> str:
    return event_hash(ts=row.ts, remediation_id=row.remediation_id, kind=row.kind, actor=row.actor, data=row.data,
                      prev_hash=row.prev_hash, key=key)


@dataclass(frozen=True)
class ChainProblem:
    event_id: int
    reason: str


@dataclass
class ChainReport:
    """What a walk over the chain found: counts, the head, and the first problem (None: intact)."""

    events: int = 0
    keyed: int = 0
    unkeyed: int = 0  # events written before the key was set: checked with plain SHA-256 only
    head: tuple[int, str] | None = None
    problem: ChainProblem | None = None


def walk_chain(
    events: Iterable[ChainedEvent], *, key: bytes | None = None, checkpoint: Checkpoint | None = None
) -> ChainReport:
    """Rows with id, ts, remediation_id, kind, actor, data, prev_hash, hash in id order -> a report.

    With `key`, every event must carry its HMAC; events with a plain SHA-256 are accepted only before the
    first keyed one (written before the key was set) and counted as unkeyed. With a checkpoint, its
    signature must match and the first remaining event must link to it.
    """
    report = ChainReport()
    if checkpoint is not None and not hmac.compare_digest(
        checkpoint_mac(checkpoint.seq, checkpoint.hash, key), checkpoint.mac
    ):
        reason = "prune checkpoint signature does not match (forged, or signed with another AUDIT_KEY)"
        report.problem = ChainProblem(checkpoint.seq, reason)
        return report
    prev = GENESIS
    first = True
    for row in events:
        if first and checkpoint is not None and row.prev_hash != GENESIS:
            if row.id <= checkpoint.seq:
                report.problem = ChainProblem(row.id, "event lies before the prune checkpoint")
                return report
            prev = checkpoint.hash
        first = False
        if row.prev_hash != prev:
            reason = "prev_hash does not match the previous event (deleted or reordered)"
            if report.events == 0:
                reason = "the first event does not follow the genesis or a signed checkpoint (older events deleted)"
            report.problem = ChainProblem(row.id, reason)
            return report
        if key is not None and hmac.compare_digest(_hash_of(row, key), row.hash):
            report.keyed += 1
        elif hmac.compare_digest(_hash_of(row), row.hash):
            if report.keyed:
                report.problem = ChainProblem(row.id, "event has no keyed hash after keyed events (rewritten)")
                return report
            report.unkeyed += 1
        else:
            reason = "content does not match its hash (edited)"
            if key is None:
                reason = "content does not match its hash (edited, or written with an AUDIT_KEY: set it to verify)"
            report.problem = ChainProblem(row.id, reason)
            return report
        if checkpoint is not None and row.id == checkpoint.seq and row.hash != checkpoint.hash:
            report.problem = ChainProblem(row.id, "event does not match the prune checkpoint")
            return report
        report.events += 1
        report.head = (row.id, row.hash)
        prev = row.hash
    return report


def verify_chain(
    events: Iterable[ChainedEvent], *, key: bytes | None = None, checkpoint: Checkpoint | None = None
) -> ChainProblem | None:
    """The first problem of the chain, or None when it is intact."""
    return walk_chain(events, key=key, checkpoint=checkpoint).problem
