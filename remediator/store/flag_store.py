"""Small controller state: flags (pause, overrides), Slack message ids, stored definition versions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from remediator.domain.json_values import JsonObject, jsonable
from remediator.store.definition_versions import DefinitionVersion
from remediator.store.models import (
    ControllerState,
    SlackMessage,
)
from remediator.store.read_store import flag_value
from remediator.store.transactions import (
    RepositoryBase,
)

__all__ = ["OVERRIDE_FLAG_PREFIX", "PAUSE_FLAG", "FlagStore"]

PAUSE_FLAG = "pause"  # {"paused": bool, "by": actor}: the kill switch (api/routes/guardrails.py)
OVERRIDE_FLAG_PREFIX = "override:"  # + remediation id: a human let this one past the guardrails


class FlagStore(RepositoryBase):
    """Small controller state (a mixin of `Repository`)."""

    async def get_flag(self, key: str) -> JsonObject | None:
        async with self.transaction() as session:
            return await flag_value(session, key)

    async def set_flag(self, key: str, value: Mapping[str, object], *, audit_kind: str, actor: str) -> None:
        async with self.transaction() as session:
            row = await session.get(ControllerState, key)
            if row is None:
                session.add(ControllerState(key=key, value=jsonable(value), updated_at=self.clock()))
            else:
                row.value = jsonable(value)
                row.updated_at = self.clock()
            await self.audit(session, audit_kind, actor=actor, data=value)

    async def get_slack_message(self, rem_id: str) -> tuple[str, str] | None:
        """(channel id, ts) of the Slack message about `rem_id`, if one was posted."""
        async with self.transaction() as session:
            row = await session.get(SlackMessage, rem_id)
            return (row.channel, row.ts) if row else None

    async def put_slack_message(self, rem_id: str, channel: str, ts: str) -> None:
        """Remember (or move) the Slack message about `rem_id`."""
        async with self.transaction() as session:
            row = await session.get(SlackMessage, rem_id)
            now = self.clock()
            if row is None:
                session.add(SlackMessage(remediation_id=rem_id, channel=channel, ts=ts, created_at=now, updated_at=now))
            else:
                row.channel, row.ts, row.updated_at = channel, ts, now

    async def save_definition_version(self, version: str, sources: dict[str, str]) -> bool:
        """Store the source text of a definition set once; True when this call stored it."""
        try:
            async with self.transaction() as session:
                if await session.get(DefinitionVersion, version) is not None:
                    return False
                session.add(DefinitionVersion(version=version, created_at=self.clock(), sources=dict(sources)))
                await session.flush()
                return True
        except IntegrityError:
            return False  # another replica stored the same version a moment ago

    async def get_definition_version(self, version: str) -> DefinitionVersion | None:
        async with self.transaction() as session:
            return await session.get(DefinitionVersion, version)

    async def list_definition_versions(self, limit: int = 100) -> list[tuple[str, datetime]]:
        """(version, first stored at), newest first."""
        async with self.transaction() as session:
            rows = await session.execute(
                select(DefinitionVersion.version, DefinitionVersion.created_at)
                .order_by(DefinitionVersion.created_at.desc())
                .limit(limit)
            )
            return [(str(v), ts) for v, ts in rows.all()]
