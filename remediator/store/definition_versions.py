"""The `definition_versions` table: the exact source text of every definition set a remediation ran with.

Written when a set is loaded and before the first remediation that uses it is recorded, so
`GET /api/v1/definitions/{version}` answers after a restart, and on every replica.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, String
from sqlalchemy.orm import Mapped, mapped_column

from remediator.store.models import Base

__all__ = ["DefinitionVersion"]


class DefinitionVersion(Base):
    """One definition set by content hash: file name (e.g. `rules/gpu-xid.yaml`) -> text."""

    __tablename__ = "definition_versions"

    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime]
    sources: Mapped[dict[str, str]] = mapped_column(JSON)  # file name -> its text
