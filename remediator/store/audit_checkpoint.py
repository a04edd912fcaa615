"""Where the audit chain starts once old events are pruned: a signed checkpoint in `controller_state`.

The checkpoint holds the id and hash of the last event deleted and an HMAC of both under the audit key, so
a forged or replaced checkpoint does not verify. Kept apart from the repository so the chain code, the
pruner and the verifier read it the same way.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from remediator.domain.json_values import JsonObject
from remediator.store.audit import GENESIS, ChainProblem, ChainReport, Checkpoint, checkpoint_mac, walk_chain
from remediator.store.models import AuditEvent, ControllerState

__all__ = ["CHECKPOINT_KEY", "audit_head", "chain_start", "load_checkpoint", "save_checkpoint", "verify_since"]

CHECKPOINT_KEY = "audit.checkpoint"


async def load_checkpoint(session: AsyncSession) -> Checkpoint | None:
    row = await session.get(ControllerState, CHECKPOINT_KEY)
    if row is None:
        return None
    try:
        return Checkpoint.from_dict(row.value)
    except (KeyError, TypeError, ValueError):
        return Checkpoint(-1, "", "")  # unreadable: verifies as forged


async def chain_start(session: AsyncSession) -> str:
    """The prev_hash of the first event when the table is empty: the checkpoint's hash, else the genesis."""
    checkpoint = await load_checkpoint(session)
    return checkpoint.hash if checkpoint is not None and checkpoint.hash else GENESIS


async def save_checkpoint(
    session: AsyncSession, seq: int, hash_at_cut: str, key: bytes | None, now: datetime
) -> Checkpoint:
    checkpoint = Checkpoint(seq, hash_at_cut, checkpoint_mac(seq, hash_at_cut, key))
    row = await session.get(ControllerState, CHECKPOINT_KEY)
    value: JsonObject = {**checkpoint.as_dict(), "at": now.isoformat(), "keyed": key is not None}
    if row is None:
        session.add(ControllerState(key=CHECKPOINT_KEY, value=value, updated_at=now))
    else:
        row.value = value
        row.updated_at = now
    return checkpoint


async def audit_head(session: AsyncSession) -> tuple[int, str] | None:
    """(id, hash) of the newest event: what `remediator audit head` prints and the controller logs."""
    query = select(AuditEvent.id, AuditEvent.hash).order_by(AuditEvent.id.desc()).limit(1)
    row = (await session.execute(query)).first()
    return None if row is None else (int(row[0]), str(row[1]))


async def verify_since(
    session: AsyncSession, key: bytes | None, since: tuple[int, str] | None
) -> ChainReport:
    """Check the audit chain from `since` (an event already checked: id, hash) to the head.

    Without `since`, or when `since` has been pruned, the whole chain is walked (from the signed prune
    checkpoint, as `remediator audit verify` does). Otherwise only the events after it are read, plus
    `since` itself, which must still be there with the same hash (a rewrite or truncation of what was
    checked shows as a problem). The periodic check of the controller runs this, so each run reads only
    what was appended since the last one.
    """
    checkpoint = await load_checkpoint(session)
    if since is not None and (checkpoint is None or since[0] > checkpoint.seq):
        seq, digest = since
        anchor = await session.get(AuditEvent, seq)
        if anchor is None or anchor.hash != digest:
            report = ChainReport()
            report.problem = ChainProblem(seq, "an event already checked is missing or its hash changed")
            return report
        newer = await session.scalars(select(AuditEvent).where(AuditEvent.id > seq).order_by(AuditEvent.id))
        # `since` was verified: it stands in for a signed checkpoint (the chain continues from its hash).
        report = walk_chain(newer.all(), key=key, checkpoint=Checkpoint(seq, digest, checkpoint_mac(seq, digest, key)))
        if report.problem is None and key is not None and report.unkeyed:
            # The key was set when these were written (the controller holds it): a plain hash is a rewrite.
            report.problem = ChainProblem(seq, f"{report.unkeyed} event(s) after {seq} have no keyed hash")
        return report
    events = await session.scalars(select(AuditEvent).order_by(AuditEvent.id))
    return walk_chain(events.all(), key=key, checkpoint=checkpoint)
