"""The column values of one stored webhook batch and of one stored alert, as the intake inserts them.

Both intake paths (SQLAlchemy's bulk insert, and the SQLite intake's own connection) and the rewrite of a raced
first delivery as a repeat (store/intake_repeats.py) carry these rows; the keys are the tables' column names
(store/models.py: AlertBatch, AlertRow).
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

__all__ = ["AlertValues", "BatchValues"]


class BatchValues(TypedDict):
    """One `alert_batches` row."""

    id: str
    received_at: datetime
    receiver: str
    status: str
    group_key: str
    external_url: str
    truncated_alerts: int
    alert_count: int
    repeat_count: int


class AlertValues(TypedDict):
    """One `alerts` row as delivered: `dedup_key` set on a first delivery, `repeat_of` on a repeat."""

    batch_id: str
    fingerprint: str
    alertname: str
    status: str
    starts_at: datetime
    ends_at: datetime | None
    labels: dict[str, str]
    annotations: dict[str, str]
    generator_url: str
    received_at: datetime
    dedup_key: str | None
    repeat_of: int | None
    state: str
