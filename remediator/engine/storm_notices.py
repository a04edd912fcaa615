"""What people are told about a storm: one Slack message per storm, edited in place as it grows.

A storm (engine/storm_guard.py) is one event for people, however many nodes it holds, so it gets one message:
posted with `chat.postMessage` when the storm is first told, then edited with `chat.update` (same channel and
ts, kept in the storm's row so every replica and a restarted controller edit the same one) as nodes join or the
candidates change, and a last time when it is approved, rejected or closed. The message names the suspected
cause ("14 of 15 faulting nodes run driver 580.95.05; 22% of the fleet does"), the top candidates with their
counts, how many remediations wait, and, while the storm is open, an approve-group link: a random 256-bit
token in a URL (`/storms/{id}/approval/{token}`), of which the storm keeps only the SHA-256, so a database
reader cannot decide anything. A Slack incoming webhook cannot edit what it posted, so there a storm is posted
once when it is first told and once when it is decided.

Changes are coalesced: a storm marked changed while its message is being sent is told once more, from the
record as it is then, never from a stale copy; after each message the record is read again and, if another
replica or the API changed it meanwhile, told again. Delivery runs in a task of its own and never holds up an
admission or a decision; a failure is counted and audited (`notification.failed`) like any other message.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Mapping, Sequence
from typing import Final

from remediator.adapters.notifier import (
    Button,
    Channel,
    Message,
    SlackBot,
    SlackThread,
    SlackWebhook,
    Tone,
    slack_delete,
    slack_post_or_edit,
)
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.domain.storms import StormState, nodes_phrase
from remediator.process.metrics import Metrics
from remediator.settings import Settings
from remediator.store.repository import Repository
from remediator.store.storm_records import HeldRemediation, StormRecord

__all__ = ["WEBHOOK_PLACE", "StormNotices", "storm_link", "storm_message", "storm_page_url"]

log = logging.getLogger(__name__)

# What a message says (state, nodes, candidates' counts, decided by, held ids): compared, never read.
Said = tuple[str, tuple[str, ...], tuple[tuple[JsonValue, ...], ...], str | None, tuple[str, ...]]

WEBHOOK_PLACE: Final = "incoming-webhook"  # the storm's slack_channel when only a webhook told it (ts: the phase)
_TOP = 3  # candidates shown in the message (the page shows them all)
_MAX_NODES = 20
_TONES: Final[Mapping[str, Tone]] = {"open": "warning", "approved": "good", "rejected": "danger", "closed": "info"}


def storm_page_url(public_url: str, storm_id: str) -> str:
    """The address of the storm's page (served by routes/storm_ui.py: storm_page)."""
    return f"{public_url.rstrip('/')}/storms/{storm_id}"


def storm_link(public_url: str, storm_id: str, token: str) -> str:
    """The approve-group link: the storm's page for people holding the token (routes/storm_ui.py)."""
    return f"{storm_page_url(public_url, storm_id)}/approval/{token}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _candidates(storm: StormRecord) -> list[JsonObject]:
    """The analysis's candidates (domain/storms.py), most telling first."""
    found = storm["analysis"].get("candidates")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def storm_message(storm: StormRecord, held: Sequence[HeldRemediation], *, page: str,
                  approve_link: str | None) -> Message:
    """The storm's message as it stands (pure). Plain mrkdwn; the adapter escapes every text for Slack."""
    state = storm["state"]
    cause = storm["cause"]
    phrase = nodes_phrase(cause["key"], cause["value"])
    nodes = storm["nodes"]
    by, reason = storm["decided_by"], storm["decision_reason"]
    why = f": {reason}" if reason else ""
    titles = {
        "open": f"Storm on {phrase}: {_plural(len(nodes), 'node')} faulting, held for one decision",
        "approved": f"Storm on {phrase} approved by {by}",
        "rejected": f"Storm on {phrase} rejected by {by}",
        "closed": f"Storm on {phrase} closed",
    }
    lines = [f"*Suspected cause:* {cause['text']}"]
    if state == StormState.OPEN:
        lines.append(f"{_plural(len(held), 'remediation')} on {phrase} wait for one group decision; nodes "
                     "outside it go on.")
    elif state == StormState.APPROVED:
        lines.append(f"Approved by {by}{why}. The remediations it held were released; later ones on {phrase} "
                     "are not held by this storm.")
    elif state == StormState.REJECTED:
        lines.append(f"Rejected by {by}{why}. The remediations it held were cancelled; later ones on {phrase} "
                     "wait for a person.")
    else:
        decision = next((str(e.get("event")) for e in reversed(storm["timeline"])
                         if e.get("event") in ("approved", "rejected")), "decided")
        decided = f" after it was {decision} by {by}" if by else ""
        lines.append(f"Closed{decided}: no node sharing the cause faulted for a window.")
    candidates = _candidates(storm)
    tested = [c for c in candidates if c.get("p_value") is not None][:_TOP]
    described = [c for c in candidates if c.get("p_value") is None][:2]
    if tested:
        lines.append("*Top candidates*")
        lines.extend(f"• {c.get('text')}" for c in tested)
    if described:
        lines.append("*Also shared* (fleet share unknown)")
        lines.extend(f"• {c.get('text')}" for c in described)
    shown = ", ".join(nodes[:_MAX_NODES]) + (f" and {len(nodes) - _MAX_NODES} more" if len(nodes) > _MAX_NODES
                                              else "")
    lines.append(f"*Nodes ({len(nodes)}):* {shown}")
    lines.append(f"storm `{storm['id']}`")
    buttons: list[Button] = []
    if state == StormState.OPEN and approve_link:
        buttons.append(Button("Approve or reject the group", url=approve_link, style="primary"))
    buttons.append(Button("Open the storm page", url=page))
    return Message(
        event=f"storm_{state}",
        title=titles.get(state, f"Storm {state}")[:150],
        text="\n".join(lines),
        tone=_TONES.get(state, "info"),
        fields=(("State", state), ("Nodes", str(len(nodes))), ("Held now", str(len(held))),
                ("Cause", f"{cause['key']}={cause['value']}")),
        buttons=tuple(buttons),
        data={"storm_id": storm["id"], "event": f"storm_{state}", "state": state, "cause": dict(cause),
              "nodes": nodes, "held": [h["id"] for h in held], "ui_url": page, "approval_url": approve_link},
    )


def _said(storm: StormRecord, held: Sequence[HeldRemediation]) -> Said:
    """What a message says, to tell whether the record moved on while it was sent."""
    candidates = [(c.get("key"), c.get("value"), c.get("faulting"), c.get("faulting_total"))
                  for c in _candidates(storm)]
    return (storm["state"], tuple(storm["nodes"]), tuple(candidates), storm["decided_by"],
            tuple(h["id"] for h in held))


def _place(storm: StormRecord) -> tuple[str, str] | None:
    slack = storm["slack"]
    return (str(slack["channel"]), str(slack["ts"])) if slack is not None and slack["ts"] else None


class StormNotices:
    """The storms' messages of one notification service (engine/notifications.py) to its Slack channel."""

    def __init__(self, channels: Sequence[Channel], repo: Repository, settings: Settings, metrics: Metrics) -> None:
        self.bots = [c for c in channels if isinstance(c, SlackBot)]
        self.hooks = [c for c in channels if isinstance(c, SlackWebhook)]
        self.repo = repo
        self.settings = settings
        self.metrics = metrics
        self._dirty: dict[str, None] = {}  # storms to tell, in the order they changed
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._tokens: dict[str, str] = {}  # storm id -> the approve-group link's token this process sent
        self._last: dict[str, Said] = {}  # storm id -> what this process last told the bot

    @property
    def active(self) -> bool:
        return bool(self.bots or self.hooks)

    def changed(self, storm_id: str) -> None:
        """Tell the storm as it will be when its turn comes. Returns at once."""
        if not self.active:
            return
        self._dirty[storm_id] = None
        self._idle.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="notify-storms")

    async def flush(self, limit: float = 30.0) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                await self._idle.wait()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._idle.set()

    async def _run(self) -> None:
        try:
            while self._dirty:
                storm_id = next(iter(self._dirty))
                del self._dirty[storm_id]
                try:
                    await self._tell(storm_id)
                except asyncio.CancelledError:
                    raise
                # broad: the storm loop outlives one storm's failure (store, Slack, a bug); logged, the next storm is
                # told
                except Exception:
                    log.exception("could not tell storm %s", storm_id)
        finally:
            if not self._dirty:
                self._idle.set()

    async def _link(self, storm: StormRecord) -> str | None:
        """The approve-group link while the storm is open (one token per storm and process)."""
        if storm["state"] != StormState.OPEN:
            self._tokens.pop(str(storm["id"]), None)
            return None
        token = self._tokens.get(str(storm["id"]))
        if token is None:
            token = secrets.token_urlsafe(32)
            if not await self.repo.add_storm_link(str(storm["id"]), hashlib.sha256(token.encode()).hexdigest()):
                return None
            self._tokens[str(storm["id"])] = token
        return storm_link(self.settings.public_url, str(storm["id"]), token)

    async def _tell(self, storm_id: str) -> None:
        storm = await self.repo.get_storm(storm_id)
        if storm is None:  # the admission that opened it was rolled back
            return
        held = (await self.repo.storm_holds([storm_id])).get(storm_id, [])
        said = _said(storm, held)
        message = storm_message(storm, held, page=storm_page_url(self.settings.public_url, storm_id),
                                approve_link=await self._link(storm))
        told = True
        for bot in self.bots:
            if self._last.get(storm_id) != said:
                told &= await self._deliver(bot.name, storm_id, message, self._to_bot(bot, storm, message))
        if self.hooks:
            await self._to_hooks(storm, message)
        if told:
            self._last[storm_id] = said
        again = await self.repo.get_storm(storm_id)  # another replica, or the API, may have moved it meanwhile
        if again is not None and _said(again, (await self.repo.storm_holds([storm_id])).get(storm_id, [])) != said:
            self._dirty[storm_id] = None

    async def _to_bot(self, bot: SlackBot, storm: StormRecord, message: Message) -> None:
        place = _place(storm)
        if place is not None and place[0] == WEBHOOK_PLACE:
            place = None
        thread = SlackThread(*place) if place is not None else None
        now, posted = await slack_post_or_edit(bot, message, thread)
        if not posted:
            return
        won, kept = await self.repo.swap_storm_message(str(storm["id"]), _place(storm), (now.channel, now.ts))
        if not won and kept is not None and kept[0] != WEBHOOK_PLACE:
            # Another replica posted its message first: keep that one, edit it, and take ours back.
            try:
                await slack_delete(bot, now)
            # broad: deleting a second message is cleanup; whatever Slack or the client raises, the kept message is
            # still edited
            except Exception as exc:
                log.warning("storm %s: could not delete a second message: %s", storm["id"], exc)
            await slack_post_or_edit(bot, message, SlackThread(*kept))

    async def _to_hooks(self, storm: StormRecord, message: Message) -> None:
        """An incoming webhook cannot edit: once when the storm is first told, once when it is decided."""
        phase = "opened" if storm["state"] == StormState.OPEN else "decided"
        place = _place(storm)
        told = place[1] if place is not None and place[0] == WEBHOOK_PLACE else None
        if told == phase or told == "decided":
            return
        won, _now = await self.repo.swap_storm_message(str(storm["id"]), place, (WEBHOOK_PLACE, phase))
        if not won:  # another replica told it meanwhile: look again from the record
            self._dirty[str(storm["id"])] = None
            return
        for hook in self.hooks:
            await self._deliver(hook.name, str(storm["id"]), message, hook.send(message))

    async def _deliver(self, channel: str, storm_id: str, message: Message, sending: Awaitable[None]) -> bool:
        try:
            await sending
        except asyncio.CancelledError:
            raise
        # broad: one channel's failure (NotificationFailed, or a bug in its wire format) is counted and audited; the
        # others go on
        except Exception as exc:
            self.metrics.notifications.labels(channel=channel, outcome="failed").inc()
            log.warning("storm message %s to %s failed: %s", message.event, channel, exc)
            with contextlib.suppress(Exception):
                await self.repo.record_audit(
                    "notification.failed",
                    data={"channel": channel, "event": message.event, "storm": storm_id, "error": str(exc)[:500]},
                )
            return False
        self.metrics.notifications.labels(channel=channel, outcome="sent").inc()
        return True
