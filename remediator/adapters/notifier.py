"""Outbound notifications over HTTP: Slack incoming webhooks and a generic JSON webhook.

The only place that talks HTTP to Slack or to a PagerDuty-style receiver. Each channel gets one injected
`httpx.AsyncClient` (tests swap its transport or point it at a local receiver) and retries connection
failures, 429 and 5xx with exponential backoff (tenacity); a final failure raises `NotificationFailed`.
What a message says is decided by the engine (`remediator.engine.notifications`); this module only turns
a neutral `Message` into each receiver's wire format and delivers it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from remediator.errors import RemediatorError

__all__ = [
    "Button",
    "Channel",
    "JsonWebhook",
    "Message",
    "NotificationFailed",
    "Notifier",
    "PodLine",
    "SlackWebhook",
    "Tone",
    "open_channels",
    "slack_blocks",
]

Tone = Literal["info", "good", "warning", "danger"]
_EMOJI: dict[str, str] = {
    "info": ":information_source:",
    "good": ":white_check_mark:",
    "warning": ":warning:",
    "danger": ":rotating_light:",
}
_MAX_PODS = 15


class NotificationFailed(RemediatorError):
    """A receiver could not be reached or refused the message after every retry."""

    def __init__(self, channel: str, reason: str, *, retryable: bool = True) -> None:
        self.channel = channel
        self.reason = reason
        self.retryable = retryable
        super().__init__(f"{channel}: {reason}")


@dataclass(frozen=True)
class Button:
    """A link button (Slack URL button; `url` in the JSON webhook). `action_id` set: an interactive one."""

    text: str
    url: str | None = None
    style: Literal["primary", "danger"] | None = None
    action_id: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class PodLine:
    """One affected pod and the controller that owns it."""

    namespace: str
    name: str
    owner: str = ""


@dataclass(frozen=True)
class Message:
    """What to tell people, independent of the receiver. `data` is the machine-readable event."""

    event: str
    title: str
    text: str
    tone: Tone = "info"
    fields: tuple[tuple[str, str], ...] = ()
    pods: tuple[PodLine, ...] = ()
    buttons: tuple[Button, ...] = ()
    remediation_id: str | None = None
    channel: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


class Notifier(Protocol):
    """Anything that accepts a message for delivery (actions see only this)."""

    async def send(self, message: Message) -> None: ...


class Channel(Protocol):
    """One configured receiver; `send` raises NotificationFailed after its retries."""

    @property
    def name(self) -> str: ...

    async def send(self, message: Message) -> None: ...


def _mrkdwn_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _pods_text(pods: tuple[PodLine, ...]) -> str:
    lines = [
        f"• `{_mrkdwn_escape(p.namespace)}/{_mrkdwn_escape(p.name)}`"
        + (f" ({_mrkdwn_escape(p.owner)})" if p.owner else "")
        for p in pods[:_MAX_PODS]
    ]
    if len(pods) > _MAX_PODS:
        lines.append(f"… and {len(pods) - _MAX_PODS} more")
    return "\n".join(lines)


def _button(index: int, button: Button) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "button", "text": {"type": "plain_text", "text": button.text[:75]}}
    if button.url:
        out["url"] = button.url
    if button.style:
        out["style"] = button.style
    out["action_id"] = button.action_id or f"link-{index}"
    if button.value is not None:
        out["value"] = button.value
    if button.action_id in ("approve", "reject"):
        out["confirm"] = {
            "title": {"type": "plain_text", "text": "Are you sure?"},
            "text": {"type": "mrkdwn", "text": f"This will *{button.action_id}* the remediation."},
            "confirm": {"type": "plain_text", "text": button.text[:30]},
            "deny": {"type": "plain_text", "text": "Cancel"},
        }
    return out


def slack_blocks(message: Message) -> list[dict[str, Any]]:
    """Block Kit for one message: header, summary, facts, affected pods, buttons."""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": message.title[:150]}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"{_EMOJI[message.tone]} {_mrkdwn_escape(message.text)[:2900]}",
            },
        },
    ]
    if message.fields:
        blocks.append(
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*{_mrkdwn_escape(k)}*\n{_mrkdwn_escape(v)[:1900]}"}
                    for k, v in message.fields[:10]
                ],
            }
        )
    if message.pods:
        blocks.append(
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"*Affected pods ({len(message.pods)})*\n{_pods_text(message.pods)}"[:2990],
                },
            }
        )
    if message.buttons:
        blocks.append({"type": "actions", "elements": [_button(i, b) for i, b in enumerate(message.buttons[:5])]})
    if message.remediation_id:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": f"remediation `{message.remediation_id}` · event `{message.event}`",
                    }
                ],
            }
        )
    return blocks


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, NotificationFailed) and exc.retryable


class _HttpChannel:
    """POST JSON with retries; subclasses decide the body."""

    name: ClassVar[str] = "http"

    def __init__(
        self,
        url: str,
        http: httpx.AsyncClient,
        *,
        attempts: int = 4,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 8.0,
    ) -> None:
        self.url = url
        self._http = http
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds

    def body(self, message: Message) -> dict[str, Any]:
        raise NotImplementedError

    async def send(self, message: Message) -> None:
        body = self.body(message)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._attempts),
            wait=wait_exponential(multiplier=self._backoff, max=self._max_backoff),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                await self._post(body)

    async def _post(self, body: dict[str, Any]) -> None:
        try:
            response = await self._http.post(self.url, json=body)
        except httpx.TransportError as exc:
            raise NotificationFailed(self.name, f"{type(exc).__name__}: {exc}") from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise NotificationFailed(self.name, f"HTTP {response.status_code}: {response.text[:200]}")
        if response.status_code >= 300:
            raise NotificationFailed(self.name, f"HTTP {response.status_code}: {response.text[:200]}", retryable=False)


class SlackWebhook(_HttpChannel):
    """Slack incoming webhook: Block Kit plus a plain-text fallback for notifications on phones."""

    name: ClassVar[str] = "slack"

    def body(self, message: Message) -> dict[str, Any]:
        out: dict[str, Any] = {
            "text": f"{message.title}: {message.text}"[:3000],
            "blocks": slack_blocks(message),
        }
        if message.channel:
            out["channel"] = message.channel
        return out


class JsonWebhook(_HttpChannel):
    """A generic JSON receiver (PagerDuty-style bridges, chat relays, ticketing)."""

    name: ClassVar[str] = "webhook"

    def body(self, message: Message) -> dict[str, Any]:
        return {
            "event": message.event,
            "title": message.title,
            "text": message.text,
            "severity": message.tone,
            "remediation_id": message.remediation_id,
            "channel": message.channel,
            "fields": dict(message.fields),
            "pods": [{"namespace": p.namespace, "name": p.name, "owner": p.owner} for p in message.pods],
            "links": [{"text": b.text, "url": b.url} for b in message.buttons if b.url],
            "data": dict(message.data),
        }


DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0)


async def _nothing() -> None:
    return None


def open_channels(
    slack_webhook_url: str | None,
    notify_webhook_url: str | None,
    http: httpx.AsyncClient | None = None,
    *,
    attempts: int = 4,
    backoff_seconds: float = 0.5,
) -> tuple[list[Channel], Callable[[], Awaitable[None]]]:
    """The configured channels on one shared client, and how to close that client when done."""
    if not slack_webhook_url and not notify_webhook_url:
        return [], _nothing
    client = http or httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, follow_redirects=False)
    channels: list[Channel] = []
    if slack_webhook_url:
        channels.append(SlackWebhook(slack_webhook_url, client, attempts=attempts, backoff_seconds=backoff_seconds))
    if notify_webhook_url:
        channels.append(JsonWebhook(notify_webhook_url, client, attempts=attempts, backoff_seconds=backoff_seconds))
    return channels, (client.aclose if http is None else _nothing)
