"""Shared-cause storms in the database (engine/storm_guard.py): opened, grown, decided and closed, audited.

A storm must hold on every replica and after a restart, and its group decision must reach every remediation it
holds, so it is a row: the cause, the faulting nodes, the analysis as last computed, a timeline, and the
decision with who made it and why. The remediations it holds say so in their state reason
(`storm <id>: ...`), which is how a decision finds them.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import Text, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from remediator.domain.json_values import JsonObject, JsonValue
from remediator.domain.states import State
from remediator.domain.storms import StormState
from remediator.domain.timestamps import as_utc
from remediator.store.admission import WindowFault
from remediator.store.models import AuditEvent, Remediation, Storm
from remediator.store.storm_records import HeldRemediation, StormRecord
from remediator.store.transactions import RepositoryBase

__all__ = ["STORM_REASON", "StormStore", "storm_record"]

STORM_REASON = "storm "  # how a hold by a storm reads: "storm <id>: ..."
# not closed: the storm still decides for its cause's nodes
OPEN_STATES = (StormState.OPEN, StormState.APPROVED, StormState.REJECTED)
MAX_LINKS = 50  # approve-group links remembered per storm (each replica or restart sends its own)
SlackPlace = tuple[str, str]  # (channel, ts) of a storm's Slack message; ("incoming-webhook", phase) for webhooks


def _iso(value: datetime | None) -> str | None:
    return as_utc(value).isoformat() if value else None


def _candidates(analysis: JsonObject) -> list[tuple[JsonValue, ...]]:
    """What of an analysis people are shown: each candidate with its counts (not its floating p-value)."""
    candidates = analysis.get("candidates")
    if not isinstance(candidates, list):
        return []
    return [(c.get("key"), c.get("value"), c.get("faulting"), c.get("faulting_total"), c.get("fleet"))
            for c in candidates if isinstance(c, dict)]


def storm_record(storm: Storm) -> StormRecord:
    """A storm as the API, the audit log, the UI and `remediator get storms` show it."""
    return {
        "id": storm.id, "state": storm.state, "opened_at": _iso(storm.opened_at), "updated_at": _iso(storm.updated_at),
        "cause": {"key": storm.cause_key, "value": storm.cause_value, "text": storm.cause_text},
        "nodes": list(storm.nodes), "analysis": dict(storm.analysis), "timeline": list(storm.timeline),
        "decided_at": _iso(storm.decided_at), "decided_by": storm.decided_by,
        "decision_reason": storm.decision_reason,
        "slack": {"channel": storm.slack_channel, "ts": storm.slack_ts} if storm.slack_ts else None,
    }


_IDS_PER_READ = 500  # ids in one IN (...): under SQLite's 999 bound parameters

class StormStore(RepositoryBase):
    """Storms (a mixin of `Repository`)."""

    async def window_faults(self, since: datetime, session: AsyncSession | None = None) -> list[
            WindowFault]:
        """(node, alert name, plan, alert labels, context, created) of the remediations created since `since`;
        read in `session` when given (the admitting transaction)."""
        if session is None:
            async with self.transaction() as own:
                return await self.window_faults(since, own)
        rows = await session.execute(
            select(Remediation.node, Remediation.alertname, Remediation.plan, Remediation.alert_labels,
                   Remediation.context, Remediation.created_at)
            .where(Remediation.created_at >= since, Remediation.node.is_not(None))
        )
        return [(str(n), str(a), p, dict(labels or {}), dict(ctx or {}), c)
                for n, a, p, labels, ctx, c in rows.all()]

    async def window_keys(self, since: datetime, session: AsyncSession) -> list[tuple[str, bool]]:
        """(id, context stored) of the remediations created since `since`: one narrow read (no plan or context
        decoded), so the storm guard reads whole rows only for those it has not seen as they are now."""
        has_context = func.coalesce(func.length(cast(Remediation.context, Text)), 0) > 2  # more than `{}`
        rows = await session.execute(
            select(Remediation.id, has_context).where(Remediation.created_at >= since, Remediation.node.is_not(None))
        )
        return [(str(rid), bool(stored)) for rid, stored in rows.all()]

    async def window_faults_of(self, ids: Sequence[str], session: AsyncSession) -> dict[str, WindowFault]:
        """(node, alert name, plan, alert labels, context, created) of these remediations, by id."""
        out: dict[str, WindowFault] = {}
        for start in range(0, len(ids), _IDS_PER_READ):
            rows = await session.execute(
                select(Remediation.id, Remediation.node, Remediation.alertname, Remediation.plan,
                       Remediation.alert_labels, Remediation.context, Remediation.created_at)
                .where(Remediation.id.in_(ids[start:start + _IDS_PER_READ]))
            )
            for rid, n, a, p, labels, ctx, c in rows.all():
                out[str(rid)] = (str(n), str(a), p, dict(labels or {}), dict(ctx or {}), c)
        return out

    async def live_storms(self, session: AsyncSession | None = None) -> list[StormRecord]:
        """The storms not closed, oldest first (read in `session` when given)."""
        if session is None:
            async with self.transaction() as own:
                return await self.live_storms(own)
        rows = await session.scalars(select(Storm).where(Storm.state.in_(OPEN_STATES)).order_by(Storm.opened_at))
        return [storm_record(s) for s in rows]

    async def list_storms(self, *, include_closed: bool = True, limit: int = 200) -> list[StormRecord]:
        async with self.transaction() as session:
            query = select(Storm).order_by(Storm.opened_at.desc()).limit(limit)
            if not include_closed:
                query = query.where(Storm.state.in_(OPEN_STATES))
            return [storm_record(s) for s in await session.scalars(query)]

    async def get_storm(self, storm_id: str) -> StormRecord | None:
        async with self.transaction() as session:
            storm = await session.get(Storm, storm_id)
            return None if storm is None else storm_record(storm)

    async def record_storm(self, key: str, value: str, text: str, nodes: Sequence[str],
                           analysis: JsonObject, session: AsyncSession | None = None
                           ) -> tuple[StormRecord, bool]:
        """Open a storm for this cause, or grow the live one: (its record, whether it changed). Audited as
        `storm.opened` and `storm.grown` (new nodes). Written in `session` when given (the admitting
        transaction), else in a transaction of its own."""
        if session is None:
            async with self.transaction() as own:
                return await self.record_storm(key, value, text, nodes, analysis, own)
        now = self.clock()
        storm = (await session.scalars(
            select(Storm).where(Storm.state.in_(OPEN_STATES), Storm.cause_key == key, Storm.cause_value == value)
            .with_for_update()
        )).first()
        if storm is None:
            storm = Storm(id=str(uuid.uuid4()), opened_at=now, updated_at=now, state=StormState.OPEN, cause_key=key,
                          cause_value=value, cause_text=text, nodes=sorted(set(nodes)), analysis=analysis,
                          timeline=[{"at": now.isoformat(), "event": "opened", "nodes": len(set(nodes)),
                                     "cause": text}])
            session.add(storm)
            await self.audit(session, "storm.opened", data={"storm": storm.id, "cause": text,
                                                             "nodes": storm.nodes})
            return storm_record(storm), True
        new = sorted(set(nodes) - set(storm.nodes))
        if not new:
            if _candidates(storm.analysis) == _candidates(analysis):
                return storm_record(storm), False
            # The same nodes, other candidates or counts (a fault elsewhere in the window): the record, and the
            # Slack message drawn from it, say so; not audited, nothing it holds changes.
            storm.analysis, storm.cause_text = analysis, text
            return storm_record(storm), True
        storm.nodes = sorted(set(storm.nodes) | set(nodes))
        storm.analysis, storm.cause_text, storm.updated_at = analysis, text, now
        storm.timeline = [*storm.timeline, {"at": now.isoformat(), "event": "grown", "added": [*new],
                                            "nodes": len(storm.nodes), "cause": text}]
        await self.audit(session, "storm.grown", data={"storm": storm.id, "added": new, "cause": text})
        return storm_record(storm), True

    async def decide_storm(self, storm_id: str, decision: str, *, actor: str, reason: str | None
                           ) -> tuple[StormRecord | None, list[str]]:
        """Approve or reject an open storm: (its record, the ids of the remediations it holds). None: no such
        storm. A storm already decided is returned as it is, with no ids (the first decision stands)."""
        if decision not in ("approved", "rejected"):
            raise ValueError(f"decision must be approved or rejected, not {decision!r}")
        now = self.clock()
        async with self.transaction() as session:
            storm = await session.get(Storm, storm_id, with_for_update=True)
            if storm is None:
                return None, []
            if storm.state != StormState.OPEN:
                return storm_record(storm), []
            storm.state, storm.decided_at, storm.decided_by, storm.decision_reason = decision, now, actor, reason
            storm.updated_at = now
            storm.timeline = [*storm.timeline, {"at": now.isoformat(), "event": decision, "by": actor,
                                                "reason": reason}]
            held = list(await session.scalars(
                select(Remediation.id).where(Remediation.state == State.HELD,
                                             Remediation.state_reason.startswith(f"{STORM_REASON}{storm_id}:"))
            ))
            await self.audit(session, f"storm.{decision}", actor=actor,
                             data={"storm": storm_id, "cause": storm.cause_text, "reason": reason,
                                   "remediations": held})
            return storm_record(storm), held

    async def close_storms(self, before: datetime, session: AsyncSession | None = None) -> list[str]:
        """Close the decided storms that have not grown since `before`; audited as `storm.closed`. An open storm
        is never closed by time: what it holds waits for its decision."""
        if session is None:
            async with self.transaction() as own:
                return await self.close_storms(before, own)
        now = self.clock()
        closed: list[str] = []
        for storm in await session.scalars(
            select(Storm).where(Storm.state.in_((StormState.APPROVED, StormState.REJECTED)), Storm.updated_at < before)
            .with_for_update()
        ):
            storm.state, storm.updated_at = StormState.CLOSED, now
            storm.timeline = [*storm.timeline, {"at": now.isoformat(), "event": "closed"}]
            await self.audit(session, "storm.closed", data={"storm": storm.id, "cause": storm.cause_text})
            closed.append(storm.id)
        return closed

    async def note_storm_message(self, storm_id: str, channel: str, ts: str) -> None:
        """Where the storm's Slack message is, so later growth edits it in place."""
        async with self.transaction() as session:
            storm = await session.get(Storm, storm_id, with_for_update=True)
            if storm is not None:
                storm.slack_channel, storm.slack_ts = channel, ts

    async def storm_holds(self, storm_ids: Collection[str] | None = None) -> dict[str, list[HeldRemediation]]:
        """The remediations each storm holds now, by storm id: [{id, node, playbook, created_at}], by node."""
        async with self.transaction() as session:
            rows = await session.execute(
                select(Remediation.id, Remediation.node, Remediation.playbook, Remediation.state_reason,
                       Remediation.created_at)
                .where(Remediation.state == State.HELD, Remediation.state_reason.startswith(STORM_REASON))
            )
            found = rows.all()
        out: dict[str, list[HeldRemediation]] = {}
        for rem_id, node, playbook, reason, created in found:
            storm_id = str(reason)[len(STORM_REASON):].split(":", 1)[0]
            if storm_ids is None or storm_id in storm_ids:
                out.setdefault(storm_id, []).append({"id": rem_id, "node": node, "playbook": playbook,
                                                     "created_at": _iso(created)})
        for held in out.values():
            held.sort(key=lambda r: (str(r["node"]), str(r["created_at"])))
        return out

    async def storm_events(self, storm_id: str, *, limit: int = 1000) -> list[AuditEvent]:
        """The audit log's `storm.*` events of one storm, oldest first (its timeline as audited)."""
        async with self.transaction() as session:
            storm = await session.get(Storm, storm_id)
            if storm is None:
                return []
            opened = storm.opened_at
            since = (opened - timedelta(minutes=1)).astimezone(UTC).replace(tzinfo=None)
            events = await session.scalars(
                select(AuditEvent).where(AuditEvent.kind.startswith("storm."), AuditEvent.ts >= since)
                .order_by(AuditEvent.id).limit(100 * limit)
            )
            return [e for e in events if isinstance(e.data, dict) and e.data.get("storm") == storm_id][:limit]

    async def swap_storm_message(self, storm_id: str, expect: SlackPlace | None, new: SlackPlace
                                 ) -> tuple[bool, SlackPlace | None]:
        """Set where the storm's Slack message is to `new` only if it is `expect` now (compare-and-set, so two
        replicas never both keep a message of their own): (whether it was set, where it is now)."""
        async with self.transaction() as session:
            storm = await session.get(Storm, storm_id, with_for_update=True)
            if storm is None:
                return False, None
            now: SlackPlace | None = (storm.slack_channel or "", storm.slack_ts) if storm.slack_ts else None
            if now != expect:
                return False, now
            storm.slack_channel, storm.slack_ts = new
            return True, new

    async def add_storm_link(self, storm_id: str, token_hash: str) -> bool:
        """Remember the SHA-256 of an approve-group link sent for an open storm (False: no such open storm)."""
        async with self.transaction() as session:
            storm = await session.get(Storm, storm_id, with_for_update=True)
            if storm is None or storm.state != StormState.OPEN:
                return False
            storm.approval_links = [*(storm.approval_links or []), token_hash][-MAX_LINKS:]
            return True

    async def storm_by_link(self, storm_id: str, token_hash: str) -> StormRecord | None:
        """The storm an approve-group link was sent for, or None (unknown storm, or not one of its links)."""
        async with self.transaction() as session:
            storm = await session.get(Storm, storm_id)
            if storm is None:
                return None
            known = [str(h) for h in storm.approval_links or []]
            matched = False
            for digest in known:  # constant time per digest: a link is never guessed by its timing
                matched |= hmac.compare_digest(digest.encode(), token_hash.encode())
            return storm_record(storm) if matched else None
