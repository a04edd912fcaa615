"""Retention: delete processed alerts and old audit events, keeping the audit chain verifiable.

Before audit events are deleted, a signed checkpoint (id and hash of the last event deleted, HMAC under
the audit key) is written in the same transaction, so `remediator audit verify` verifies what remains from
the checkpoint. The newest event is never deleted, and the prune itself is recorded as an audit event.
Alerts still waiting to be processed are never deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, exists, func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from remediator.store.audit import Checkpoint
from remediator.store.audit_checkpoint import save_checkpoint
from remediator.store.models import AlertBatch, AlertRow, AuditEvent
from remediator.store.repository import Repository, utcnow

__all__ = ["PruneReport", "prune"]

_PRUNE_LOCK = 7_313_004


@dataclass
class PruneReport:
    audit_events: int = 0
    alerts: int = 0
    batches: int = 0
    checkpoint: Checkpoint | None = None

    @property
    def deleted(self) -> bool:
        return bool(self.audit_events or self.alerts or self.batches)


async def _serialize(repo: Repository, session: AsyncSession) -> None:
    if repo.dialect == "postgresql":  # one pruner at a time across replicas; SQLite serializes writers anyway
        await session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PRUNE_LOCK})


async def _prune_alerts(repo: Repository, before: datetime, batch: int, report: PruneReport) -> None:
    while True:
        async with repo.transaction() as session:
            await _serialize(repo, session)
            ids = list((await session.scalars(
                select(AlertRow.id).where(AlertRow.received_at < before, AlertRow.state != "new")
                .order_by(AlertRow.id).limit(batch)
            )).all())
            if ids:
                await session.execute(delete(AlertRow).where(AlertRow.id.in_(ids)))
            batch_ids = list((await session.scalars(
                select(AlertBatch.id).where(
                    AlertBatch.received_at < before, ~exists().where(AlertRow.batch_id == AlertBatch.id)
                ).limit(batch)
            )).all())
            if batch_ids:
                await session.execute(delete(AlertBatch).where(AlertBatch.id.in_(batch_ids)))
        report.alerts += len(ids)
        report.batches += len(batch_ids)
        if len(ids) < batch and len(batch_ids) < batch:
            return


async def _prune_audit(repo: Repository, before: datetime, batch: int, report: PruneReport) -> None:
    now = utcnow()
    while True:
        async with repo.transaction() as session:
            await _serialize(repo, session)
            head = await session.scalar(select(func.max(AuditEvent.id)))
            if head is None:
                return
            ids = list((await session.scalars(
                select(AuditEvent.id).where(AuditEvent.ts < before, AuditEvent.id < head)
                .order_by(AuditEvent.id).limit(batch)
            )).all())
            if not ids:
                return
            cut = ids[-1]
            hash_at_cut = await session.scalar(select(AuditEvent.hash).where(AuditEvent.id == cut))
            assert hash_at_cut is not None
            # The checkpoint first, in the same transaction: the remaining chain links to it.
            report.checkpoint = await save_checkpoint(session, cut, hash_at_cut, repo.audit_key, now)
            await session.execute(delete(AuditEvent).where(AuditEvent.id <= cut))
        report.audit_events += len(ids)
        if len(ids) < batch:
            return


async def prune(
    repo: Repository, *, audit_before: datetime | None, alerts_before: datetime | None, batch: int = 5000
) -> PruneReport:
    """Delete what is older than the cut-offs (None: keep); record the prune in the audit log."""
    report = PruneReport()
    if alerts_before is not None:
        await _prune_alerts(repo, alerts_before, batch, report)
    if audit_before is not None:
        await _prune_audit(repo, audit_before, batch, report)
    if report.deleted:
        data: dict[str, object] = {
            "alerts_deleted": report.alerts, "alert_batches_deleted": report.batches,
            "audit_events_deleted": report.audit_events,
            "alerts_before": alerts_before.isoformat() if alerts_before else None,
            "audit_before": audit_before.isoformat() if audit_before else None,
        }
        if report.checkpoint is not None:
            data["checkpoint"] = {"seq": report.checkpoint.seq, "hash": report.checkpoint.hash}
        async with repo.transaction() as session:
            await repo.audit(session, "retention.pruned", data=data)
    return report
