"""Outbound notifications over HTTP: Slack (incoming webhook or bot token), a generic JSON webhook, and
the follow-ups to Slack's `response_url`.

The only place that talks HTTP to Slack or to a PagerDuty-style receiver. Each channel gets one injected
`httpx.AsyncClient` (tests swap its transport or point it at a local receiver) and retries connection
failures, 429 and 5xx with exponential backoff (tenacity); a final failure raises `NotificationFailed`.
The Slack bot (`SlackBot`, Web API `chat.postMessage` / `chat.update`) keeps one message per remediation
and edits it in place; it also retries Slack's `ok: false` answers that are transient (`ratelimited`,
honouring Retry-After) and gives up at once on the others (`channel_not_found`, `invalid_auth`, ...).
What a message says is decided by the engine (`remediator.engine.notifications`); this module only turns
a neutral `Message` into each receiver's wire format and delivers it.

Slack reads `<`, `>` and `&` in mrkdwn text as links, mentions (`<!channel>`, `<@U...>`) and entities, and
message text comes partly from outside (alert labels and annotations, pod names, a `notify` step's
message, a Slack user's name). So every text field that reaches Slack goes through one function,
`slack_escape`, here at the wire boundary: the fallback `text`, the Block Kit mrkdwn, the `response_url`
follow-ups and the interaction replies. The engine writes plain mrkdwn (`*bold*`, `` `code` ``), never links.
`response_url` follow-ups go only to the origins the operator allows (`REMEDIATOR_SLACK_RESPONSE_URL_HOSTS`,
Slack's own hosts over https by default): the URL arrives in a payload, and a signed payload is no proof that
its URL is Slack's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from remediator.errors import RemediatorError

__all__ = [
    "DEFAULT_SLACK_API_URL",
    "Button",
    "Channel",
    "JsonWebhook",
    "Message",
    "NotificationFailed",
    "Notifier",
    "Origin",
    "PodLine",
    "SlackApiError",
    "SlackBot",
    "SlackResponseUrl",
    "SlackThread",
    "SlackThreads",
    "SlackWebhook",
    "Tone",
    "open_channels",
    "open_responder",
    "response_url_refusal",
    "slack_blocks",
    "slack_escape",
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

    def __init__(self, channel: str, reason: str, *, retryable: bool = True, retry_after: float | None = None) -> None:
        self.channel = channel
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after  # what the receiver asked for (Retry-After), in seconds
        super().__init__(f"{channel}: {reason}")


class SlackApiError(NotificationFailed):
    """Slack's Web API answered `ok: false`; `error` is Slack's code (`channel_not_found`, `ratelimited`)."""

    def __init__(
        self, channel: str, method: str, error: str, *, retryable: bool, retry_after: float | None = None
    ) -> None:
        self.method = method
        self.error = error
        super().__init__(channel, f"{method}: {error}", retryable=retryable, retry_after=retry_after)


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
    # A side note on the remediation (a failed step): a threaded reply under the remediation's Slack
    # message; only channels with `threaded = True` get these.
    reply: bool = False
    # A follow-up to a Slack interaction: where to POST it, and whether it replaces the clicked message.
    response_url: str | None = None
    replace_original: bool = False


class Notifier(Protocol):
    """Anything that accepts a message for delivery (actions see only this)."""

    async def send(self, message: Message) -> None: ...


class Channel(Protocol):
    """One configured receiver; `send` raises NotificationFailed after its retries."""

    @property
    def name(self) -> str: ...

    async def send(self, message: Message) -> None: ...


def _clip(escaped: str, limit: int) -> str:
    """Cut already escaped mrkdwn to `limit` characters without leaving half an entity."""
    if len(escaped) <= limit:
        return escaped
    out = escaped[:limit]
    amp = out.rfind("&", max(0, len(out) - 4))
    return out[:amp] if amp != -1 and ";" not in out[amp:] else out


def slack_escape(text: str, limit: int | None = None) -> str:
    """`text` made literal for Slack's mrkdwn (`&`, `<`, `>` as entities), cut to at most `limit` characters.

    The one escaping function for everything sent to Slack; a cut never leaves half an entity behind.
    """
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return out if limit is None else _clip(out, limit)


def _pods_text(pods: tuple[PodLine, ...]) -> str:
    lines = [
        f"• `{slack_escape(p.namespace)}/{slack_escape(p.name)}`" + (f" ({slack_escape(p.owner)})" if p.owner else "")
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
                "text": f"{_EMOJI[message.tone]} {slack_escape(message.text, 2900)}",
            },
        },
    ]
    if message.fields:
        blocks.append(
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*{slack_escape(k, 80)}*\n{slack_escape(v, 1900)}"}
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
                    "text": _clip(f"*Affected pods ({len(message.pods)})*\n{_pods_text(message.pods)}", 2990),
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
                        "text": f"remediation `{slack_escape(message.remediation_id, 100)}` · "
                        f"event `{slack_escape(message.event, 100)}`",
                    }
                ],
            }
        )
    return blocks


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, NotificationFailed) and exc.retryable


MAX_RETRY_AFTER = 60.0


def _wait(
    backoff: float, max_backoff: float, max_retry_after: float = MAX_RETRY_AFTER
) -> Callable[[RetryCallState], float]:
    """Exponential backoff, or the receiver's Retry-After when it gave one (capped)."""
    exponential = wait_exponential(multiplier=backoff, max=max_backoff)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, NotificationFailed) and exc.retry_after is not None:
            return min(max(exc.retry_after, 0.0), max_retry_after)
        return float(exponential(state))

    return wait


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def _post_json(http: httpx.AsyncClient, url: str, body: dict[str, Any], name: str) -> None:
    """One POST; NotificationFailed (retryable for connection errors, 429 and 5xx) when it did not land."""
    try:
        response = await http.post(url, json=body)
    except httpx.TransportError as exc:
        raise NotificationFailed(name, f"{type(exc).__name__}: {exc}") from exc
    if response.status_code == 429 or response.status_code >= 500:
        raise NotificationFailed(
            name,
            f"HTTP {response.status_code}: {response.text[:200]}",
            retry_after=_retry_after(response.headers.get("retry-after")),
        )
    if response.status_code >= 300:
        raise NotificationFailed(name, f"HTTP {response.status_code}: {response.text[:200]}", retryable=False)


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
            wait=_wait(self._backoff, self._max_backoff),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                await _post_json(self._http, self.url, body, self.name)


class SlackWebhook(_HttpChannel):
    """Slack incoming webhook: Block Kit plus a plain-text fallback for notifications on phones."""

    name: ClassVar[str] = "slack"

    def body(self, message: Message) -> dict[str, Any]:
        out: dict[str, Any] = {"text": _slack_text(message), "blocks": slack_blocks(message)}
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


DEFAULT_SLACK_API_URL = "https://slack.com/api"
# Slack's `ok: false` codes worth another attempt; any other (channel_not_found, invalid_auth,
# not_in_channel, ...) will not get better by asking again.
_SLACK_TRANSIENT = frozenset({"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"})
# chat.update codes after which the remembered message is gone: post a new one and remember that.
_SLACK_MESSAGE_GONE = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})


@dataclass(frozen=True)
class SlackThread:
    """Where a remediation's Slack message is: the channel id Slack answered with and the message ts."""

    channel: str
    ts: str


class SlackThreads(Protocol):
    """Durable memory of one Slack message per remediation (the engine keeps it in the database)."""

    async def get(self, remediation_id: str) -> SlackThread | None: ...

    async def put(self, remediation_id: str, thread: SlackThread) -> None: ...


class _MemoryThreads:
    """Used when nothing durable is given (a restart then posts a new message)."""

    def __init__(self) -> None:
        self._threads: dict[str, SlackThread] = {}

    async def get(self, remediation_id: str) -> SlackThread | None:
        return self._threads.get(remediation_id)

    async def put(self, remediation_id: str, thread: SlackThread) -> None:
        self._threads[remediation_id] = thread


def _slack_text(message: Message) -> str:
    """The top-level `text` (notifications, phones, screen readers): mrkdwn too, so escaped like the blocks."""
    return slack_escape(f"{message.title}: {message.text}", 3000)


class SlackBot:
    """Slack through a bot token: one message per remediation, edited in place as it moves.

    The first message about a remediation is posted with `chat.postMessage` and its `ts` remembered
    (`threads`); every later one replaces it with `chat.update`. A message with `reply` set (a failed step)
    goes as a threaded reply under it. Messages about no remediation (the `notify` action) are plain posts.
    """

    name: ClassVar[str] = "slack"
    threaded: ClassVar[bool] = True

    def __init__(
        self,
        token: str,
        channel: str,
        http: httpx.AsyncClient,
        *,
        api_url: str = DEFAULT_SLACK_API_URL,
        threads: SlackThreads | None = None,
        attempts: int = 4,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 8.0,
        max_retry_after: float = MAX_RETRY_AFTER,
    ) -> None:
        self.channel = channel
        self.api_url = api_url.rstrip("/")
        self.threads: SlackThreads = threads if threads is not None else _MemoryThreads()
        self._token = token
        self._http = http
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._max_retry_after = max_retry_after

    async def send(self, message: Message) -> None:
        rem_id = message.remediation_id
        thread = await self.threads.get(rem_id) if rem_id else None
        if message.reply:
            body = self._body(message, message.channel or self.channel)
            if thread is not None:
                body.update(channel=thread.channel, thread_ts=thread.ts)
            await self.call("chat.postMessage", body)
            return
        if rem_id is None or message.channel:  # not the remediation's own message: a plain post
            await self.call("chat.postMessage", self._body(message, message.channel or self.channel))
            return
        if thread is not None:
            try:
                await self.call("chat.update", {**self._body(message, thread.channel), "ts": thread.ts})
                return
            except SlackApiError as exc:
                if exc.error not in _SLACK_MESSAGE_GONE:
                    raise
        answer = await self.call("chat.postMessage", self._body(message, self.channel))
        channel, ts = answer.get("channel"), answer.get("ts")
        if isinstance(channel, str) and isinstance(ts, str) and ts:
            await self.threads.put(rem_id, SlackThread(channel=channel, ts=ts))

    def _body(self, message: Message, channel: str) -> dict[str, Any]:
        return {
            "channel": channel,
            "text": _slack_text(message),
            "blocks": slack_blocks(message),
            "unfurl_links": False,
        }

    async def call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """One Web API method with retries; Slack's answer when `ok`, else SlackApiError/NotificationFailed."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._attempts),
            wait=_wait(self._backoff, self._max_backoff, self._max_retry_after),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._call_once(method, body)
        raise AssertionError("unreachable: tenacity re-raises the last failure")  # pragma: no cover

    async def _call_once(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._http.post(
                f"{self.api_url}/{method}",
                json=body,
                headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json; charset=utf-8"},
            )
        except httpx.TransportError as exc:
            raise NotificationFailed(self.name, f"{method}: {type(exc).__name__}: {exc}") from exc
        retry_after = _retry_after(response.headers.get("retry-after"))
        if response.status_code == 429:
            raise SlackApiError(self.name, method, "ratelimited", retryable=True, retry_after=retry_after)
        if response.status_code >= 500:
            raise NotificationFailed(self.name, f"{method}: HTTP {response.status_code}: {response.text[:200]}")
        if response.status_code >= 300:
            raise NotificationFailed(
                self.name, f"{method}: HTTP {response.status_code}: {response.text[:200]}", retryable=False
            )
        try:
            answer = response.json()
        except ValueError as exc:
            raise NotificationFailed(self.name, f"{method}: the answer is not JSON", retryable=False) from exc
        if not isinstance(answer, dict):
            raise NotificationFailed(self.name, f"{method}: the answer is not a JSON object", retryable=False)
        if answer.get("ok") is not True:
            error = str(answer.get("error") or "unknown_error")[:100]
            raise SlackApiError(self.name, method, error, retryable=error in _SLACK_TRANSIENT, retry_after=retry_after)
        return answer


Origin = tuple[str, str, int]  # (scheme, host, port), as Settings.slack_response_origins gives them


def response_url_refusal(url: str, allowed: Collection[Origin]) -> str | None:
    """Why `url` must not be followed, or None when its scheme, host and port are one of `allowed`.

    Parsed by httpx, the parser of the client that would POST to it, so what is checked is where the
    request would go (a `user@` part, a trailing-dot host or a look-alike host are refused, never guessed).
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "response_url is not a valid URL"
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        return "response_url is not an http(s) URL"
    host = parsed.raw_host.decode("ascii", "replace").lower()
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    where = f"{parsed.scheme}://{host}:{port}"
    if parsed.userinfo:
        return f"response_url to {where} carries user information; refused"
    if (parsed.scheme, host, port) not in allowed:
        return f"response_url to {where} is not in REMEDIATOR_SLACK_RESPONSE_URL_HOSTS; not followed"
    return None


class SlackResponseUrl:
    """Follow-ups to Slack interactions: POSTs a message to the `response_url` Slack sent with a click.

    Only to the origins in `allowed_origins`; any other URL is refused before a connection is made.
    """

    name: ClassVar[str] = "slack-response"

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        allowed_origins: Collection[Origin],
        attempts: int = 4,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 8.0,
    ) -> None:
        self.allowed_origins = frozenset(allowed_origins)
        self._http = http
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds

    def body(self, message: Message) -> dict[str, Any]:
        out: dict[str, Any] = {"text": _slack_text(message), "replace_original": message.replace_original}
        if message.replace_original:
            out["blocks"] = slack_blocks(message)
        else:
            out["response_type"] = "ephemeral"
            out["text"] = slack_escape(message.text, 3000)
        return out

    async def send(self, message: Message) -> None:
        url = message.response_url or ""
        refusal = response_url_refusal(url, self.allowed_origins)
        if refusal is not None:
            raise NotificationFailed(self.name, refusal, retryable=False)
        body = self.body(message)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._attempts),
            wait=_wait(self._backoff, self._max_backoff),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                await _post_json(self._http, url, body, self.name)


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
    slack_bot_token: str | None = None,
    slack_channel: str | None = None,
    slack_api_url: str = DEFAULT_SLACK_API_URL,
    slack_threads: SlackThreads | None = None,
) -> tuple[list[Channel], Callable[[], Awaitable[None]]]:
    """The configured channels on one shared client, and how to close that client when done.

    A bot token with a channel selects the Slack bot; it then replaces the Slack incoming webhook.
    """
    bot = bool(slack_bot_token and slack_channel)
    if not slack_webhook_url and not notify_webhook_url and not bot:
        return [], _nothing
    client = http or httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, follow_redirects=False)
    channels: list[Channel] = []
    if bot:
        assert slack_bot_token is not None and slack_channel is not None
        channels.append(
            SlackBot(
                slack_bot_token,
                slack_channel,
                client,
                api_url=slack_api_url,
                threads=slack_threads,
                attempts=attempts,
                backoff_seconds=backoff_seconds,
            )
        )
    elif slack_webhook_url:
        channels.append(SlackWebhook(slack_webhook_url, client, attempts=attempts, backoff_seconds=backoff_seconds))
    if notify_webhook_url:
        channels.append(JsonWebhook(notify_webhook_url, client, attempts=attempts, backoff_seconds=backoff_seconds))
    return channels, (client.aclose if http is None else _nothing)


def open_responder(
    http: httpx.AsyncClient | None = None,
    *,
    allowed_origins: Collection[Origin],
    attempts: int = 4,
    backoff_seconds: float = 0.5,
) -> tuple[SlackResponseUrl, Callable[[], Awaitable[None]]]:
    """The `response_url` poster on its own client (or `http`; never following redirects), and how to close it."""
    client = http or httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, follow_redirects=False)
    responder = SlackResponseUrl(
        client, allowed_origins=allowed_origins, attempts=attempts, backoff_seconds=backoff_seconds
    )
    return responder, (client.aclose if http is None else _nothing)
