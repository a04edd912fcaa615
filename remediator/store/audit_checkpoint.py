"""Where the audit chain starts once old events are pruned: a signed checkpoint in `controller_state`.

The checkpoint holds the id and hash of the last event deleted and an HMAC of both under the audit key, so
a forged or replaced checkpoint does not verify. Kept apart from the repository so the chain code, the
pruner and the verifier read it the same way.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from remediator.store.audit import GENESIS, Checkpoint, checkpoint_mac
from remediator.store.models import AuditEvent, ControllerState

__all__ = ["CHECKPOINT_KEY", "audit_head", "chain_start", "load_checkpoint", "save_checkpoint"]

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
    value = {**checkpoint.as_dict(), "at": now.isoformat(), "keyed": key is not None}
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
