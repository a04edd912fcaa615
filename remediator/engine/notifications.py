"""What people are told about a remediation, and delivery that can never hold one up.

The executor, the worker and the approval service report events here (`remediation_event`); this module
turns each into a receiver-neutral `Message` (alert, node, GPU, affected pods, links to the UI and the
approval page) and queues it for every configured channel (Slack incoming webhook or Slack bot, JSON
webhook). Each channel has its own queue and sender task, so a receiver that is down delays only its own
messages and never the remediation. A message that still fails after the adapter's retries is counted in
`remediator_notifications_total{channel,outcome}` and recorded as an audit event `notification.failed`.

The Slack bot edits one message per remediation; `SlackMessageStore` keeps that message's ts in the
database so a restarted controller still edits the same one. Failed steps go to threaded channels only
(`step_failed`, a reply under the message), and a decision taken in Slack gets a `response_url` follow-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace as replace_message
from datetime import datetime
from typing import Any

from remediator.adapters.notifier import Button, Channel, Message, PodLine, SlackThread, Tone, open_responder
from remediator.engine.storm_notices import StormNotices
from remediator.process.metrics import Metrics
from remediator.settings import Settings
from remediator.store.models import Remediation
from remediator.store.repository import Repository

__all__ = ["EVENTS", "NotificationService", "SlackMessageStore", "pods_of", "ui_link"]

log = logging.getLogger(__name__)

# event -> (title prefix, tone)
EVENTS: Mapping[str, tuple[str, Tone]] = {
    "approval_requested": ("Approval needed", "warning"),
    "approved": ("Approved", "info"),
    "rejected": ("Rejected", "warning"),
    "expired": ("Approval expired", "warning"),
    "started": ("Remediation started", "info"),
    "held": ("Held by a guardrail", "warning"),
    "succeeded": ("Remediation succeeded", "good"),
    "planned": ("Remediation planned (plan-only: nothing was changed)", "info"),
    "failed": ("Remediation failed", "danger"),
    "cancelled": ("Cancelled", "warning"),
    "reverting": ("Reverting", "info"),
    "reverted": ("Reverted", "good"),
    "return_requested": ("Return to service requested", "warning"),
    "returned": ("Returned to service by a person", "good"),
    "released": ("Released: a person lifted the quarantine by hand", "warning"),
    "approval_superseded": ("Approval superseded", "info"),
    "return_waiting": ("Still quarantined", "warning"),
    "return_refused": ("Return to service refused", "danger"),
    "escalated": ("Escalated", "danger"),
    "gate_unknown": ("Gate verdict unknown: node agent not answering", "danger"),
    "gate_recovered": ("Node agent answers again", "good"),
    "step_failed": ("Step failed", "danger"),
    "message": ("Message", "info"),
}
# Side notes: sent as threaded replies, and only to channels that thread (the Slack bot).
REPLY_EVENTS = frozenset({"step_failed"})


class SlackMessageStore:
    """The Slack bot's message per remediation, kept in the database (survives a restart)."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo

    async def get(self, remediation_id: str) -> SlackThread | None:
        found = await self.repo.get_slack_message(remediation_id)
        return SlackThread(channel=found[0], ts=found[1]) if found else None

    async def put(self, remediation_id: str, thread: SlackThread) -> None:
        await self.repo.put_slack_message(remediation_id, thread.channel, thread.ts)


def ui_link(settings: Settings, rem_id: str) -> str:
    return f"{settings.public_url.rstrip('/')}/remediations/{rem_id}"


def _owner_text(pod: Mapping[str, Any]) -> str:
    owners = pod.get("owners")
    if owners is None and pod.get("owner") is not None:
        owners = [pod["owner"]]
    parts: list[str] = []
    for owner in owners or []:
        if isinstance(owner, Mapping):
            kind, name = owner.get("kind") or "", owner.get("name") or ""
            gone = " (gone)" if owner.get("missing") else ""
            parts.append((f"{kind}/{name}" if kind else str(name)) + gone)
        elif owner:
            parts.append(str(owner))
    if not parts and pod.get("owner_kind"):
        parts.append(f"{pod.get('owner_kind')}/{pod.get('owner_name') or ''}")
    return " → ".join(parts)


def pods_of(context: Mapping[str, Any]) -> list[PodLine]:
    """The affected pods recorded in a remediation's context, with their owners (tolerant of shape)."""
    out: list[PodLine] = []
    for pod in context.get("pods") or []:
        if isinstance(pod, Mapping):
            out.append(
                PodLine(
                    namespace=str(pod.get("namespace") or ""),
                    name=str(pod.get("name") or pod.get("pod") or "?"),
                    owner=_owner_text(pod),
                )
            )
    return out


def _gpu_text(rem: Remediation) -> str:
    parts = [p for p in (f"#{rem.gpu_index}" if rem.gpu_index else None, rem.gpu_uuid) if p]
    return " ".join(parts) or "-"


def _alert_text(rem: Remediation) -> str:
    xid = rem.alert_labels.get("xid")
    return f"{rem.alertname} (Xid {xid})" if xid else rem.alertname


class NotificationService:
    """Engine-facing notifier; also satisfies the adapters' `Notifier` protocol for the `notify` action."""

    def __init__(
        self,
        channels: Sequence[Channel],
        repo: Repository,
        metrics: Metrics,
        settings: Settings,
        *,
        queue_size: int = 1000,
        on_close: Callable[[], Awaitable[None]] | None = None,
        responder: Channel | None = None,
    ) -> None:
        self.channels = list(channels)
        self._on_close = on_close
        self._responder = responder
        self._close_responder: Callable[[], Awaitable[None]] | None = None
        self.repo = repo
        self.metrics = metrics
        self.settings = settings
        self._queue_size = queue_size
        self._queues: dict[str, asyncio.Queue[Message]] = {}
        self._senders: dict[str, asyncio.Task[None]] = {}
        self._last: dict[str, tuple[str, str]] = {}
        self._storms: StormNotices | None = None  # one Slack message per storm (engine/storm_notices.py)

    @property
    def channel_names(self) -> list[str]:
        return [c.name for c in self.channels]

    # -- producing --------------------------------------------------------------------------------

    async def send(self, message: Message) -> None:
        """Queue a message for every channel (a reply: every threaded one); returns at once, never raises."""
        channels = [c for c in self.channels if not message.reply or getattr(c, "threaded", False)]
        self._enqueue(message, channels)

    def _enqueue(self, message: Message, channels: Sequence[Channel]) -> None:
        for channel in channels:
            queue = self._queue_for(channel)
            try:
                queue.put_nowait(message)
            except asyncio.QueueFull:
                self.metrics.notifications.labels(channel=channel.name, outcome="dropped").inc()
                log.warning("notification queue for %s is full; dropped %s", channel.name, message.event)

    async def remediation_event(
        self,
        rem_id: str,
        event: str,
        detail: str = "",
        *,
        approval_link: str | None = None,
        expires_at: datetime | None = None,
        interactive_value: str | None = None,
    ) -> None:
        """Tell people about `event` on a remediation. Never raises: no notification is worth a failure."""
        reply = event in REPLY_EVENTS
        if reply and not any(getattr(c, "threaded", False) for c in self.channels):
            return
        if not self.channels or self._last.get(rem_id) == (event, detail):
            return  # e.g. a held remediation re-checked every few seconds: say it once
        if not reply:
            self._last[rem_id] = (event, detail)
        if len(self._last) > 10_000:
            self._last.clear()
        try:
            rem = await self.repo.get(rem_id)
            if rem is None:
                return
            await self.send(
                self.build(
                    rem,
                    event,
                    detail,
                    approval_link=approval_link,
                    expires_at=expires_at,
                    interactive_value=interactive_value,
                )
            )
        # broad: preparing a message is best effort; whatever it raises is logged and the remediation goes on
        except Exception:
            log.exception("could not prepare the %s notification for %s", event, rem_id)

    def build(
        self,
        rem: Remediation,
        event: str,
        detail: str,
        *,
        approval_link: str | None = None,
        expires_at: datetime | None = None,
        interactive_value: str | None = None,
    ) -> Message:
        """The message for one event (pure apart from reading settings)."""
        prefix, tone = EVENTS.get(event, (event.replace("_", " ").capitalize(), "info"))
        where = rem.node or rem.namespace or rem.target_key
        summary = str(rem.alert_annotations.get("summary") or rem.alert_annotations.get("description") or "")
        text = f"*{rem.playbook}* for {_alert_text(rem)} on `{where}`"
        if summary:
            text += f"\n{summary}"
        if detail:
            text += f"\n{detail}"
        if event == "approval_requested" and expires_at is not None:
            text += f"\nThe request expires at {expires_at:%Y-%m-%d %H:%M} UTC."
        if event == "succeeded" and (rem.state_reason or "").startswith("plan-only"):
            tone = "info"
        fields = (
            ("Alert", _alert_text(rem)),
            ("Node", rem.node or "-"),
            ("GPU", _gpu_text(rem)),
            ("Playbook", rem.playbook),
            ("Rule", rem.rule),
            ("State", rem.state),
        )
        buttons: list[Button] = []
        if approval_link:
            buttons.append(Button("Review and decide", url=approval_link, style="primary"))
        buttons.append(Button("Open in the UI", url=ui_link(self.settings, rem.id)))
        if interactive_value and self.settings.slack_signing_secret:
            buttons.append(Button("Approve", action_id="approve", value=interactive_value, style="primary"))
            buttons.append(Button("Reject", action_id="reject", value=interactive_value, style="danger"))
        if event in REPLY_EVENTS:  # a reply under the remediation's message: just what happened
            return Message(
                event=event,
                title=f"{prefix}: {rem.playbook} on {where}"[:150],
                text=detail or prefix,
                tone=tone,
                remediation_id=rem.id,
                reply=True,
                data={"remediation_id": rem.id, "event": event, "detail": detail, "state": rem.state},
            )
        return Message(
            event=event,
            title=f"{prefix}: {rem.playbook} on {where}"[:150],
            text=text,
            tone=tone,
            fields=fields,
            pods=tuple(pods_of(rem.context)),
            buttons=tuple(buttons),
            remediation_id=rem.id,
            data={
                "remediation_id": rem.id,
                "event": event,
                "detail": detail,
                "state": rem.state,
                "playbook": rem.playbook,
                "rule": rem.rule,
                "node": rem.node,
                "gpu_uuid": rem.gpu_uuid,
                "gpu_index": rem.gpu_index,
                "alertname": rem.alertname,
                "labels": dict(rem.alert_labels),
                "approval_url": approval_link,
                "ui_url": ui_link(self.settings, rem.id),
            },
        )

    def storm_event(self, storm_id: str) -> None:
        """A storm opened, grew, changed its candidates, was decided or closed: its one Slack message says so
        (engine/storm_notices.py). Returns at once, never raises."""
        try:
            if self._storms is None:
                self._storms = StormNotices(self.channels, self.repo, self.settings, self.metrics)
            self._storms.changed(storm_id)
        # broad: this never raises (its docstring): any failure queuing the storm message is logged
        except Exception:
            log.exception("could not queue the message of storm %s", storm_id)

    # -- Slack interactions -----------------------------------------------------------------------

    async def slack_follow_up(
        self, response_url: str, rem_id: str, event: str, text: str, *, replace_original: bool | None = None
    ) -> None:
        """Answer a decision (`event`: approved, rejected) taken in Slack through its `response_url`.

        Queued, never raises. With an incoming webhook the clicked message is replaced (the current state,
        who decided, no buttons left to click); the Slack bot edits that message itself, so there the
        clicker gets an ephemeral note instead.
        """
        try:
            replace = (
                not any(getattr(c, "threaded", False) for c in self.channels)
                if replace_original is None
                else replace_original
            )
            rem = await self.repo.get(rem_id)
            message = Message(
                event=event, title=EVENTS.get(event, (event, "info"))[0], text=text, remediation_id=rem_id
            )
            if rem is not None and replace:
                message = self.build(rem, event, text)  # no interactive value: no Approve/Reject buttons
            message = replace_message(message, response_url=response_url, replace_original=replace)
            if self._responder is None:
                self._responder, self._close_responder = open_responder(
                    allowed_origins=self.settings.slack_response_origins,
                    attempts=self.settings.notify_attempts,
                    backoff_seconds=self.settings.notify_backoff.total_seconds(),
                    budget_seconds=self.settings.notify_budget.total_seconds(),
                )
            self._enqueue(message, [self._responder])
        # broad: a best-effort follow-up; any failure preparing it is logged, the interaction was already answered
        except Exception:
            log.exception("could not prepare the Slack follow-up for %s", rem_id)

    # -- delivering -------------------------------------------------------------------------------

    def _queue_for(self, channel: Channel) -> asyncio.Queue[Message]:
        queue = self._queues.get(channel.name)
        if queue is None:
            queue = self._queues[channel.name] = asyncio.Queue(self._queue_size)
        sender = self._senders.get(channel.name)
        if sender is None or sender.done():
            self._senders[channel.name] = asyncio.create_task(
                self._deliver(channel, queue), name=f"notify-{channel.name}"
            )
        return queue

    async def _deliver(self, channel: Channel, queue: asyncio.Queue[Message]) -> None:
        while True:
            message = await queue.get()
            try:
                await self._send_one(channel, message)
            finally:
                queue.task_done()

    async def _send_one(self, channel: Channel, message: Message) -> None:
        try:
            await channel.send(message)
        except asyncio.CancelledError:
            raise
        # broad: one channel's failure (NotificationFailed, or a bug in its wire format) is counted and audited; the
        # others still get the message
        except Exception as exc:
            self.metrics.notifications.labels(channel=channel.name, outcome="failed").inc()
            log.warning("notification %s to %s failed: %s", message.event, channel.name, exc)
            with contextlib.suppress(Exception):
                await self.repo.record_audit(
                    "notification.failed",
                    remediation_id=message.remediation_id,
                    data={"channel": channel.name, "event": message.event, "error": str(exc)[:500]},
                )
            return
        self.metrics.notifications.labels(channel=channel.name, outcome="sent").inc()

    async def flush(self, limit: float = 30.0) -> None:
        """Wait until every queued message was delivered or given up on (tests, demo, shutdown)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                if self._storms is not None:
                    await self._storms.flush(limit)
                for queue in list(self._queues.values()):
                    await queue.join()

    async def aclose(self, limit: float = 5.0) -> None:
        """Deliver what is queued (briefly), then stop the senders."""
        await self.flush(limit)
        if self._storms is not None:
            await self._storms.aclose()
        for task in self._senders.values():
            task.cancel()
        for task in self._senders.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._senders.clear()
        if self._close_responder is not None:
            await self._close_responder()
            self._close_responder = None
        if self._on_close is not None:
            await self._on_close()
