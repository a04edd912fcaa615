"""Why did nothing happen? The alerts the controller received that started no remediation, and why.

An SRE who sees a hot GPU alert fire and no drain follow asks this first. Every processed alert row records
its outcome (engine/decision.py `decide_alert`, store/decision_store.py `record_decisions`): no rule matched, no node
to act on, a cooldown after an earlier remediation, linked to one already running. An alert that did start a
remediation can still have changed nothing: a guardrail holds it (paused, node opted out, circuit breaker,
maintenance window), or it ended before acting (resolved, cancelled, rejected, approval expired). Both kinds are
listed here with the reason in words, the remediation they point at and, for a cooldown, when it ends.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from remediator.domain.json_values import JsonObject
from remediator.domain.plan_snapshot import plan_of
from remediator.domain.silences import silence_id_of
from remediator.domain.states import State, shown_state
from remediator.engine.runtime import Runtime
from remediator.engine.worker import normalize_row
from remediator.kube.vocabulary import EXCLUDE_LABEL
from remediator.store.models import AlertRow, Remediation, Silence

__all__ = ["REASONS", "Unacted", "alertmanager_payload", "silence_summary", "unacted_alerts"]

log = logging.getLogger(__name__)

# reason -> what it means, in the order the page explains them.
REASONS: Final[dict[str, str]] = {
    "unmatched": "no enabled rule matches the alert",
    "no_target": "a rule matched but the alert names no node to act on",
    "cooldown": "the rule's cooldown after an earlier remediation of the same target is still running",
    "linked": "a remediation of the same target and playbook was already active; the alert was linked to it",
    "silenced": "an active silence matched the alert's labels",
    "paused": "the controller is paused",
    "excluded": "the node is excluded (labelled remediator.io/exclude=true)",
    "guardrail": "a guardrail holds the remediation (circuit breaker, rate limit, maintenance, flapping)",
    "resolved": "the alert resolved before any step acted",
    "rejected": "a person rejected the approval request",
    "expired": "the approval request expired",
    "cancelled": "the remediation was cancelled (by a person through the API, CLI or UI, or by its own step)",
    "error": "processing the alert failed",
}

_ALERT_OUTCOMES: Final = ("unmatched", "no_target", "cooldown", "linked", "silenced", "error")
_STARTED_BUT: Final = frozenset({State.HELD, State.CANCELLED, State.REJECTED, State.EXPIRED})


@dataclass(frozen=True)
class Unacted:
    """One alert that started nothing, with the reason."""

    alert_id: int
    alertname: str
    received_at: datetime
    starts_at: datetime | None
    node: str | None
    gpu: str | None
    reason: str
    detail: str
    remediation_id: str | None = None
    remediation_state: str | None = None
    until: datetime | None = None
    generator_url: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    silence: JsonObject | None = None  # the silence that held it: id, createdBy, comment, endsAt

    def as_dict(self) -> JsonObject:
        return {
            "alert_id": self.alert_id,
            "alertname": self.alertname,
            "received_at": _iso(self.received_at),
            "starts_at": _iso(self.starts_at),
            "node": self.node,
            "gpu": self.gpu,
            "reason": self.reason,
            "meaning": REASONS.get(self.reason, self.reason),
            "detail": self.detail,
            "remediation_id": self.remediation_id,
            "remediation_state": self.remediation_state,
            "until": _iso(self.until),
            "generator_url": self.generator_url,
            "labels": {**self.labels},
            "silence": {**self.silence} if self.silence is not None else None,
        }


def silence_summary(silence: Silence) -> JsonObject:
    """What an alert's views show of the silence that held it."""
    return {"id": silence.id, "createdBy": silence.created_by, "comment": silence.comment,
            "endsAt": _iso(silence.ends_at)}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _cooldown(rt: Runtime, rem: Remediation) -> timedelta | None:
    """The cooldown that suppressed a repeat of `rem`: as snapshotted with it, else the rule now in force."""
    seconds = plan_of(rem).cooldown_seconds
    if seconds is not None and seconds > 0:
        return timedelta(seconds=seconds)
    for rule in rt.definitions.current.rules:
        if rule.name == rem.rule:
            return rule.cooldown
    return None


def _held_reason(reason: str) -> str:
    text = reason.lower()
    if text.startswith("controller is paused"):
        return "paused"
    if EXCLUDE_LABEL in text:
        return "excluded"
    return "guardrail"


def _classify(rt: Runtime, row: AlertRow, rem: Remediation | None) -> tuple[str, str, datetime | None] | None:
    """(reason, detail, until) for an alert that changed nothing; None when its remediation acted."""
    outcome = row.outcome or ""
    if outcome == "unmatched":
        return "unmatched", REASONS["unmatched"], None
    if outcome == "no_target":
        return "no_target", row.note or REASONS["no_target"], None
    if outcome == "error":
        return "error", row.note or REASONS["error"], None
    if outcome == "silenced":
        return "silenced", row.note or REASONS["silenced"], None
    if outcome == "linked":
        state = f" ({rem.state})" if rem is not None else ""
        return "linked", f"linked to remediation {row.remediation_id}{state}, already active on this target", None
    if outcome == "cooldown":
        until: datetime | None = None
        detail = row.note or "cooldown"
        if rem is not None:
            cooldown = _cooldown(rt, rem)
            finished = rem.finished_at
            if cooldown is not None and finished is not None:
                until = finished + cooldown
            detail = f"cooldown of rule {rem.rule} after an earlier remediation of this target"
        return "cooldown", detail, until
    if outcome == "started" and rem is not None and rem.state in _STARTED_BUT:
        reason = rem.state_reason or ""
        if rem.state == State.HELD:
            return _held_reason(reason), reason or REASONS["guardrail"], None
        if rem.state == State.CANCELLED:
            return ("resolved" if "resolved" in reason.lower() else "cancelled"), reason or "cancelled", None
        return rem.state, reason or REASONS[rem.state], None
    return None


async def unacted_alerts(
    rt: Runtime, *, reason: str | None = None, since: datetime | None = None, limit: int = 200
) -> list[Unacted]:
    """Newest first: alerts that started nothing (or whose remediation did nothing), with the reason."""
    rows = await rt.repo.processed_alerts(outcomes=(*_ALERT_OUTCOMES, "started"), since=since, limit=limit * 5)
    rems = await rt.repo.get_remediations(sorted({r.remediation_id for r in rows if r.remediation_id}))
    silences = await rt.repo.silences_by_id(
        [sid for r in rows if r.outcome == "silenced" and (sid := silence_id_of(r.note)) is not None]
    )
    out: list[Unacted] = []
    for row in rows:
        rem = rems.get(row.remediation_id or "")
        if row.outcome == "started" and (rem is None or rem.state not in _STARTED_BUT):
            continue
        classified = _classify(rt, row, rem)
        if classified is None or (reason is not None and classified[0] != reason):
            continue
        why, detail, until = classified
        held = silences.get(silence_id_of(row.note) or "") if why == "silenced" else None
        silence = silence_summary(held) if held is not None else None
        if silence is not None:
            detail = f"silenced by {silence['id']} ({silence['createdBy']}): {silence['comment']}"
        try:
            alert = normalize_row(rt, row)
            node, gpu = alert.node, alert.gpu_index or alert.gpu_uuid
        except Exception as exc:  # a definitions reload in between cannot break the page
            log.debug("alert %s could not be normalised: %s", row.id, exc)
            node, gpu = None, None
        out.append(Unacted(
            alert_id=row.id, alertname=row.alertname, received_at=row.received_at,
            starts_at=row.starts_at, node=node, gpu=gpu, reason=why, detail=detail,
            remediation_id=row.remediation_id,
            remediation_state=shown_state(rem.state, rem.state_reason) if rem is not None else None,
            until=until, generator_url=row.generator_url or "", labels=dict(row.labels),
            annotations=dict(row.annotations), silence=silence,
        ))
        if len(out) >= limit:
            break
    return out


def alertmanager_payload(row: AlertRow) -> JsonObject:
    """The stored alert as a one-alert Alertmanager webhook payload: the input of `remediator simulate`."""
    starts = _iso(row.starts_at) or ""
    ends = _iso(row.ends_at) or "0001-01-01T00:00:00Z"
    alert: JsonObject = {
        "status": row.status,
        "labels": {**row.labels},
        "annotations": {**row.annotations},
        "startsAt": starts,
        "endsAt": ends,
        "generatorURL": row.generator_url or "",
        "fingerprint": row.fingerprint,
    }
    return {
        "version": "4",
        "groupKey": "{}:{alertname=\"" + row.alertname.replace('"', '\\"') + "\"}",
        "truncatedAlerts": 0,
        "status": row.status,
        "receiver": "gpu-remediator",
        "groupLabels": {"alertname": row.alertname},
        "commonLabels": {**row.labels},
        "commonAnnotations": {**row.annotations},
        "externalURL": "",
        "alerts": [alert],
    }
