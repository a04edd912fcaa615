"""Signed-out web UI sessions, kept in the database so that signing out holds on every replica and restart.

The session cookie is signed, not stored (api/signin.py): without this table a copy of the cookie would keep
working until its expiry after `POST /logout`. Revoking writes the session's id with the cookie's own expiry
(and the audit event of the sign-out) in one transaction; every request with a validly signed cookie asks
`session_revoked`. Rows whose expiry has passed are pruned by the next sign-out: the cookie is refused by its
own expiry from then on.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from remediator.store.models import RevokedSession
from remediator.store.transactions import RepositoryBase

__all__ = ["SessionStore"]


class SessionStore(RepositoryBase):
    """Revoked UI sessions (a mixin of `Repository`)."""

    async def revoke_session(self, session_id: str, *, name: str, expires_at: datetime, client: str) -> None:
        """Refuse the session `session_id` from now until `expires_at`; audited as `ui.signed_out`."""
        try:
            async with self.transaction() as session:
                now = self.clock()
                await session.execute(delete(RevokedSession).where(RevokedSession.expires_at < now))
                if await session.get(RevokedSession, session_id) is not None:
                    return  # signed out already (a second click, a replayed form)
                session.add(RevokedSession(session_id=session_id, name=name, revoked_at=now, expires_at=expires_at))
                await self.audit(session, "ui.signed_out", actor=name, data={"client": client})
        except IntegrityError:
            return  # another replica revoked the same session a moment ago

    async def session_revoked(self, session_id: str) -> bool:
        """True when `session_id` was signed out (and its cookie has not expired yet)."""
        async with self.reading() as session:
            found = await session.scalar(
                select(RevokedSession.session_id).where(RevokedSession.session_id == session_id)
            )
            return found is not None
