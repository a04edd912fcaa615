"""Outbound notifications over HTTP: Slack (incoming webhook or bot token), a generic JSON webhook, and
the follow-ups to Slack's `response_url`.

The only place that talks HTTP to Slack or to a PagerDuty-style receiver. Each channel gets one injected
`httpx.AsyncClient` (tests swap its transport or point it at a local receiver). Every answer is classified
once (`transient_answer`): no answer (connection error, timeout), HTTP 408, 429 and 5xx, and Slack's
transient `ok: false` codes (`SLACK_TRANSIENT_ERRORS`: `ratelimited`, `service_unavailable`, ...) are
transient; any other 4xx and any other Slack code (`channel_not_found`, `invalid_auth`, `msg_too_long`, ...)
is permanent and not retried. Transient failures are retried through the controller's transient policy
(`remediator.retrying.TransientPolicy`) within a time budget (REMEDIATOR_NOTIFY_BUDGET), with capped
full-jitter backoff, waiting exactly the receiver's Retry-After when it sent one; a Retry-After past what is
left of the budget ends the retries at once, never a request sooner than asked. A final failure raises
`NotificationFailed` saying why (httpx's own exceptions become it in one place, `map_exceptions`). The
Slack bot (`SlackBot`, Web API `chat.postMessage` / `chat.update`)
keeps one message per remediation and edits it in place.
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

import email.utils
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar, Final, Literal, Protocol, TypeVar

import httpx

from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import NotificationFailed, SlackApiError
from remediator.kube.views import json_object
from remediator.retrying import RetriesSpent, TransientPolicy

__all__ = [
    "DEFAULT_NOTIFY_BUDGET",
    "DEFAULT_SLACK_API_URL",
    "SLACK_TRANSIENT_ERRORS",
    "Button",
    "Channel",
    "JsonWebhook",
    "Message",
    "Notifier",
    "Origin",
    "PodLine",
    "SlackBot",
    "SlackResponseUrl",
    "SlackThread",
    "SlackThreads",
    "SlackWebhook",
    "Tone",
    "map_exceptions",
    "notify_policy",
    "open_channels",
    "open_responder",
    "response_url_refusal",
    "slack_blocks",
    "slack_delete",
    "slack_escape",
    "slack_post_or_edit",
    "transient_answer",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

Tone = Literal["info", "good", "warning", "danger"]
_EMOJI: dict[str, str] = {
    "info": ":information_source:",
    "good": ":white_check_mark:",
    "warning": ":warning:",
    "danger": ":rotating_light:",
}
_MAX_PODS = 15


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
    data: Mapping[str, object] = field(default_factory=dict)
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


def _button(index: int, button: Button) -> JsonObject:
    out: JsonObject = {"type": "button", "text": {"type": "plain_text", "text": button.text[:75]}}
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


def slack_blocks(message: Message) -> list[JsonObject]:
    """Block Kit for one message: header, summary, facts, affected pods, buttons."""
    blocks: list[JsonObject] = [
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


# Slack's `ok: false` codes that asking again later can fix (Slack's Web API error reference): its rate limit,
# its own failures ("likely due to a transient issue on our end"), a request cut short, and a workspace
# being moved into an Enterprise organisation ("intermittently unavailable until the transition is
# complete"). Every other code (channel_not_found, not_in_channel, invalid_auth, not_authed, token_revoked,
# msg_too_long, invalid_blocks, ...) will not get better by asking again.
SLACK_TRANSIENT_ERRORS: Final = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
        "team_added_to_org",
    }
)
DEFAULT_NOTIFY_BUDGET: Final = 600.0  # REMEDIATOR_NOTIFY_BUDGET's default, seconds
DEFAULT_BACKOFF: Final = 0.5  # REMEDIATOR_NOTIFY_BACKOFF's default: the first wait's ceiling
MAX_BACKOFF: Final = 8.0  # the backoff's cap (a Retry-After may ask for longer and is waited out)


def transient_answer(status: int | None, slack_error: str | None = None) -> bool:
    """The one classification of a receiver's answer: may asking again later deliver the message?

    `status` None: no answer at all (connection refused or reset, timeout). HTTP 408, 429 and 5xx are
    transient, any other status of 300 or more permanent; a 2xx carrying Slack's `ok: false` is transient
    exactly when its code is in SLACK_TRANSIENT_ERRORS."""
    if status is None or status in (408, 429) or status >= 500:
        return True
    if status >= 300:
        return False
    return slack_error in SLACK_TRANSIENT_ERRORS


def notify_policy(
    budget_seconds: float = DEFAULT_NOTIFY_BUDGET,
    backoff_seconds: float = DEFAULT_BACKOFF,
    max_backoff_seconds: float = MAX_BACKOFF,
    attempts: int | None = None,
) -> TransientPolicy:
    """The transient policy of one channel: retries within `budget_seconds` (and at most `attempts` calls when
    set), full-jitter backoff from `backoff_seconds` capped at `max_backoff_seconds`, Retry-After exactly."""
    if not math.isfinite(budget_seconds) or budget_seconds < 0:
        raise ValueError(f"a notification budget must be 0 or more seconds, got {budget_seconds!r}")
    if not math.isfinite(backoff_seconds) or backoff_seconds < 0:
        raise ValueError(f"a notification backoff must be 0 or more seconds, got {backoff_seconds!r}")
    if attempts is not None and attempts < 1:
        raise ValueError(f"notification attempts must be at least 1 (or unset), got {attempts!r}")
    base = max(backoff_seconds, 0.001)  # 0 s: retry at once (a millisecond apart)
    return TransientPolicy(
        budget=budget_seconds,
        base=base,
        cap=max(base, max_backoff_seconds),
        attempts=attempts,
        exact_retry_after=True,
    )


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, NotificationFailed) and exc.retryable


def _retrying(failed: BaseException, wait: float) -> None:
    log.debug("%s; asking again in %.2f s", failed, wait)


async def _delivered(policy: TransientPolicy, attempt: Callable[[], Awaitable[T]]) -> T:
    """`attempt()` retried per `policy` while it fails transiently; a final NotificationFailed says why."""
    try:
        return await policy.run(attempt, transient=_retryable, on_retry=_retrying)
    except RetriesSpent as spent:
        failed = spent.error
        assert isinstance(failed, NotificationFailed)  # only these are retried (_retryable)
        failed.attempts = spent.attempts
        tries = "1 attempt" if spent.attempts == 1 else f"{spent.attempts} attempts"
        failed.outcome = f"transient; gave up after {tries}: {spent.why}"
        raise failed from None
    except NotificationFailed as failed:
        if not failed.retryable and not failed.outcome:
            failed.outcome = "permanent; not retried"
        raise


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: delay-seconds or an HTTP-date; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return None if math.isnan(seconds) or seconds <= 0 else seconds


def _http_failure(name: str, what: str, response: httpx.Response) -> NotificationFailed:
    return NotificationFailed(
        name,
        f"{what}HTTP {response.status_code}: {response.text[:200]}",
        retryable=transient_answer(response.status_code),
        retry_after=_retry_after(response.headers.get("retry-after")),
    )


@contextmanager
def map_exceptions(channel: str, what: str = "") -> Iterator[None]:
    """The one place this module maps httpx's exceptions onto remediator.errors (httpx's own
    `_transports/default.py` `map_exceptions` is the model): no answer (refused, reset, timed out, a broken
    protocol) is NotificationFailed for `channel`, "`what`<httpx class>: <its message>", classified as a
    failure without an answer (`transient_answer(None)`: transient)."""
    try:
        yield
    except httpx.TransportError as exc:
        raise NotificationFailed(
            channel, f"{what}{type(exc).__name__}: {exc}", retryable=transient_answer(None)
        ) from exc


async def _post_json(http: httpx.AsyncClient, url: str, body: JsonObject, name: str) -> None:
    """One POST; NotificationFailed, classified by `transient_answer`, when it did not land."""
    with map_exceptions(name):
        response = await http.post(url, json=body)
    if response.status_code >= 300:
        raise _http_failure(name, "", response)


class _HttpChannel:
    """POST JSON with retries (`notify_policy`); subclasses decide the body."""

    name: ClassVar[str] = "http"

    def __init__(
        self,
        url: str,
        http: httpx.AsyncClient,
        *,
        attempts: int | None = None,
        backoff_seconds: float = DEFAULT_BACKOFF,
        max_backoff_seconds: float = MAX_BACKOFF,
        budget_seconds: float = DEFAULT_NOTIFY_BUDGET,
    ) -> None:
        self.url = url
        self._http = http
        self.policy = notify_policy(budget_seconds, backoff_seconds, max_backoff_seconds, attempts)

    def body(self, message: Message) -> JsonObject:
        raise NotImplementedError

    async def send(self, message: Message) -> None:
        body = self.body(message)
        await _delivered(self.policy, lambda: _post_json(self._http, self.url, body, self.name))


class SlackWebhook(_HttpChannel):
    """Slack incoming webhook: Block Kit plus a plain-text fallback for notifications on phones."""

    name: ClassVar[str] = "slack"

    def body(self, message: Message) -> JsonObject:
        out: JsonObject = {"text": _slack_text(message), "blocks": list[JsonValue](slack_blocks(message))}
        if message.channel:
            out["channel"] = message.channel
        return out


class JsonWebhook(_HttpChannel):
    """A generic JSON receiver (PagerDuty-style bridges, chat relays, ticketing)."""

    name: ClassVar[str] = "webhook"

    def body(self, message: Message) -> JsonObject:
        return {
            "event": message.event,
            "title": message.title,
            "text": message.text,
            "severity": message.tone,
            "remediation_id": message.remediation_id,
            "channel": message.channel,
            "fields": {label: value for label, value in message.fields},
            "pods": [{"namespace": p.namespace, "name": p.name, "owner": p.owner} for p in message.pods],
            "links": [{"text": b.text, "url": b.url} for b in message.buttons if b.url],
            "data": json_object(message.data),
        }


DEFAULT_SLACK_API_URL = "https://slack.com/api"
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
        attempts: int | None = None,
        backoff_seconds: float = DEFAULT_BACKOFF,
        max_backoff_seconds: float = MAX_BACKOFF,
        budget_seconds: float = DEFAULT_NOTIFY_BUDGET,
    ) -> None:
        self.channel = channel
        self.api_url = api_url.rstrip("/")
        self.threads: SlackThreads = threads if threads is not None else _MemoryThreads()
        self._token = token
        self._http = http
        self.policy = notify_policy(budget_seconds, backoff_seconds, max_backoff_seconds, attempts)

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

    def _body(self, message: Message, channel: str) -> JsonObject:
        return {
            "channel": channel,
            "text": _slack_text(message),
            "blocks": list[JsonValue](slack_blocks(message)),
            "unfurl_links": False,
        }

    async def call(self, method: str, body: JsonObject) -> JsonObject:
        """One Web API method with retries; Slack's answer when `ok`, else SlackApiError/NotificationFailed."""
        return await _delivered(self.policy, lambda: self._call_once(method, body))

    async def _call_once(self, method: str, body: JsonObject) -> JsonObject:
        with map_exceptions(self.name, f"{method}: "):
            response = await self._http.post(
                f"{self.api_url}/{method}",
                json=body,
                headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json; charset=utf-8"},
            )
        retry_after = _retry_after(response.headers.get("retry-after"))
        if response.status_code == 429:  # Slack's rate limit: `ok: false, error: ratelimited` with Retry-After
            raise SlackApiError(
                self.name, method, "ratelimited", retryable=transient_answer(429), retry_after=retry_after
            )
        if response.status_code >= 300:
            raise _http_failure(self.name, f"{method}: ", response)
        try:
            answer = response.json()
        except ValueError as exc:
            raise NotificationFailed(self.name, f"{method}: the answer is not JSON", retryable=False) from exc
        if not isinstance(answer, dict):
            raise NotificationFailed(self.name, f"{method}: the answer is not a JSON object", retryable=False)
        if answer.get("ok") is not True:
            error = str(answer.get("error") or "unknown_error")[:100]
            raise SlackApiError(
                self.name,
                method,
                error,
                retryable=transient_answer(response.status_code, error),
                retry_after=retry_after,
            )
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
        attempts: int | None = None,
        backoff_seconds: float = DEFAULT_BACKOFF,
        max_backoff_seconds: float = MAX_BACKOFF,
        budget_seconds: float = DEFAULT_NOTIFY_BUDGET,
    ) -> None:
        self.allowed_origins = frozenset(allowed_origins)
        self._http = http
        self.policy = notify_policy(budget_seconds, backoff_seconds, max_backoff_seconds, attempts)

    def body(self, message: Message) -> JsonObject:
        out: JsonObject = {"text": _slack_text(message), "replace_original": message.replace_original}
        if message.replace_original:
            out["blocks"] = list[JsonValue](slack_blocks(message))
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
        await _delivered(self.policy, lambda: _post_json(self._http, url, body, self.name))


DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0)


async def _nothing() -> None:
    return None


def open_channels(
    slack_webhook_url: str | None,
    notify_webhook_url: str | None,
    http: httpx.AsyncClient | None = None,
    *,
    attempts: int | None = None,
    backoff_seconds: float = DEFAULT_BACKOFF,
    budget_seconds: float = DEFAULT_NOTIFY_BUDGET,
    slack_bot_token: str | None = None,
    slack_channel: str | None = None,
    slack_api_url: str = DEFAULT_SLACK_API_URL,
    slack_threads: SlackThreads | None = None,
) -> tuple[list[Channel], Callable[[], Awaitable[None]]]:
    """The configured channels on one shared client, and how to close that client when done.

    A bot token with a channel selects the Slack bot; it then replaces the Slack incoming webhook. Each
    channel retries transient failures for `budget_seconds` (and at most `attempts` calls when set).
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
                budget_seconds=budget_seconds,
            )
        )
    elif slack_webhook_url:
        channels.append(
            SlackWebhook(
                slack_webhook_url,
                client,
                attempts=attempts,
                backoff_seconds=backoff_seconds,
                budget_seconds=budget_seconds,
            )
        )
    if notify_webhook_url:
        channels.append(
            JsonWebhook(
                notify_webhook_url,
                client,
                attempts=attempts,
                backoff_seconds=backoff_seconds,
                budget_seconds=budget_seconds,
            )
        )
    return channels, (client.aclose if http is None else _nothing)


def open_responder(
    http: httpx.AsyncClient | None = None,
    *,
    allowed_origins: Collection[Origin],
    attempts: int | None = None,
    backoff_seconds: float = DEFAULT_BACKOFF,
    budget_seconds: float = DEFAULT_NOTIFY_BUDGET,
) -> tuple[SlackResponseUrl, Callable[[], Awaitable[None]]]:
    """The `response_url` poster on its own client (or `http`; never following redirects), and how to close it."""
    client = http or httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, follow_redirects=False)
    responder = SlackResponseUrl(
        client,
        allowed_origins=allowed_origins,
        attempts=attempts,
        backoff_seconds=backoff_seconds,
        budget_seconds=budget_seconds,
    )
    return responder, (client.aclose if http is None else _nothing)


# -- one message about something other than a remediation (a storm), edited in place ------------------------


async def slack_post_or_edit(
    bot: SlackBot, message: Message, thread: SlackThread | None
) -> tuple[SlackThread, bool]:
    """Edit the message at `thread` with `chat.update`, or post `message` with `chat.postMessage` when there is
    none or Slack says it is gone: (where the message is now, whether it was posted anew). The caller keeps
    where it is (a storm's row); `SlackBot.send` does the same for remediations through its `threads`."""
    if thread is not None:
        try:
            await bot.call("chat.update", {**bot._body(message, thread.channel), "ts": thread.ts})
            return thread, False
        except SlackApiError as exc:
            if exc.error not in _SLACK_MESSAGE_GONE:
                raise
    answer = await bot.call("chat.postMessage", bot._body(message, message.channel or bot.channel))
    channel, ts = answer.get("channel"), answer.get("ts")
    if not isinstance(channel, str) or not isinstance(ts, str) or not ts:
        raise NotificationFailed(bot.name, "chat.postMessage: the answer names no channel and ts", retryable=False)
    return SlackThread(channel=channel, ts=ts), True


async def slack_delete(bot: SlackBot, thread: SlackThread) -> None:
    """Delete a message the bot posted (`chat.delete`): a second message that lost the race to be the one."""
    await bot.call("chat.delete", {"channel": thread.channel, "ts": thread.ts})
