"""Pausing and resuming, one set of functions for the API, the CLI (through the API) and the fleet page.

The API's handlers (`POST /api/v1/pauses`, `DELETE /api/v1/pauses/{id}`, `/api/v1/pause`, `/api/v1/resume`) and
the fleet page's confirmed forms call these, so a pause made from the page is the same record, audit event and
wake-up as one made with `remediator pause`. The page also says, before anything is done, exactly what a pause
or a resume will do (`describe_new_pause`, `describe_resume`): the scope in words, the end, which remediations
in flight it catches now, and what happens to steps already running.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from remediator.domain.durations import format_duration
from remediator.domain.json_values import JsonObject
from remediator.domain.pauses import ActivePause
from remediator.domain.states import ACTIVE_STATES
from remediator.engine.runtime import Runtime
from remediator.store.flag_store import PAUSE_FLAG

__all__ = [
    "KILL_SWITCH", "Said", "describe_new_pause", "describe_resume", "end_pause", "lift_kill_switch",
    "pause_everything", "scope_words", "start_pause", "who",
]

KILL_SWITCH = "kill-switch"  # how the page names the kill switch where a pause ID goes


@dataclass(frozen=True)
class Said:
    """What the confirmation shows: one sentence saying what will happen, and the details under it."""

    headline: str
    details: list[str] = field(default_factory=list)
    caught: list[str] = field(default_factory=list)  # the remediations in flight it concerns, one line each


async def start_pause(
    rt: Runtime, *, actor: str, reason: str, nodes: Sequence[str], selector: str | None, playbooks: Sequence[str],
    ends_at: datetime | None,
) -> JsonObject:
    """Store a pause (its fields validated by the caller); audited as `pause.created` with `actor`."""
    return await rt.repo.create_pause(created_by=actor, reason=reason, nodes=nodes, selector=selector,
                                      playbooks=playbooks, ends_at=ends_at)


async def end_pause(rt: Runtime, pause_id: str, *, actor: str, reason: str | None) -> JsonObject | None:
    """End one pause now (audited as `pause.ended`) and look at the held remediations again; None: no such pause.
    The caller wakes the worker."""
    ended = await rt.repo.end_pause(pause_id, actor=actor, reason=reason)
    if ended is not None:
        await rt.repo.wake_held()
    return ended


async def pause_everything(rt: Runtime, *, actor: str, reason: str) -> None:
    """The kill switch: no new step starts anywhere until it is lifted (audited as `controller.paused`)."""
    await rt.repo.set_flag(PAUSE_FLAG, {"paused": True, "by": actor, "reason": reason}, audit_kind="controller.paused",
                           actor=actor)
    rt.metrics.paused.set(1)


async def lift_kill_switch(rt: Runtime, *, actor: str, reason: str | None) -> list[str]:
    """Lift the kill switch and end the pauses whose scope is everything; the ids of the pauses ended. The caller
    wakes the worker."""
    await rt.repo.set_flag(PAUSE_FLAG, {"paused": False, "by": actor, "reason": reason},
                           audit_kind="controller.resumed", actor=actor)
    rt.metrics.paused.set(0)
    ended = await rt.repo.end_everything_pauses(actor=actor, reason=reason)
    await rt.repo.wake_held()
    return ended


def who(actor: str | None) -> str:
    """An actor as a person reads it (as the pages' `who` macro): an API caller that gave no name is said so
    in words, never a bare `api`."""
    return actor if actor and actor != "api" else "an API caller that gave no name"


def _names(kind: str, names: Sequence[str]) -> str:
    return f"{kind} {names[0]}" if len(names) == 1 else f"{kind}s {', '.join(names)}"


def scope_words(nodes: Sequence[str], selector: str | None, playbooks: Sequence[str]) -> str:
    """`on nodes matching rack=r12`, `of playbook reset-gpu on node gpu-1`, `everywhere (every node, every
    playbook)`: where a pause holds, as domain/pauses.py decides it (nodes or selector, and playbooks)."""
    where = [_names("node", list(nodes))] if nodes else []
    if selector:
        where.append(f"nodes matching {selector}")
    on = f"on {' and on '.join(where)}" if where else ""
    of = f"of {_names('playbook', list(playbooks))}" if playbooks else ""
    if not on and not of:
        return "everywhere (every node, every playbook)"
    return " ".join(part for part in (of, on if on else "on every node") if part)


def _end_words(ends_at: datetime | None, length: str | None, now: datetime) -> str:
    if ends_at is None:
        return "until someone resumes it"
    at = ends_at.strftime("%Y-%m-%d %H:%M UTC")
    if length:
        return f"for {length} (until {at})"
    return f"until {at} ({format_duration(ends_at - now)} from now)"


class _Listed(Protocol):
    """A remediation as a confirmation lists it (a stored row or a list summary)."""

    @property
    def id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def playbook(self) -> str: ...
    @property
    def node(self) -> str | None: ...
    @property
    def target_key(self) -> str: ...
    @property
    def gpu_index(self) -> str | None: ...


def _line(rem: _Listed) -> str:
    gpu = f" GPU {rem.gpu_index}" if rem.gpu_index else ""
    return f"{rem.playbook} on {rem.node or rem.target_key}{gpu} ({rem.state}, {str(rem.id)[:8]})"


async def describe_new_pause(
    rt: Runtime, *, nodes: Sequence[str], selector: str | None, playbooks: Sequence[str], ends_at: datetime | None,
    length: str | None, reason: str, actor: str,
) -> Said:
    """The confirmation of a new pause: `Hold new steps on nodes matching rack=r12 for 2h (until ...): ...`."""
    now = rt.clock()
    probe = ActivePause("new", actor, reason, tuple(nodes), selector, tuple(playbooks), ends_at)
    caught: list[str] = []
    for state in sorted(ACTIVE_STATES):
        for rem in await rt.repo.list_remediations(state=str(state), limit=500):
            labels = ((rem.context or {}).get("node") or {}).get("labels") or {}
            if probe.holds(rem.node, labels, rem.playbook):
                caught.append(_line(rem))
    headline = (f"Hold new steps {scope_words(nodes, selector, playbooks)} {_end_words(ends_at, length, now)}: no "
                "step that changes a node or a GPU starts there, forward or undo, while it holds.")
    details = [
        "A step already running finishes; the remediation then waits, held, naming this pause.",
        "A new alert there is recorded and its remediation waits, held, until the pause ends.",
        "Read-only steps still run; a person's return to service still goes on.",
    ]
    if selector:
        details.append(f"Node labels are read before each step: a node labelled {selector} later is held from its "
                       "next step on (the remediations listed below match by the labels last read).")
    how = "from the fleet page, `remediator resume ID` or the API"
    details.append(f"It ends by itself then; it can be resumed earlier {how}." if ends_at is not None else
                   f"It has no end: it holds until someone resumes it {how}.")
    details.append(f"Recorded in the audit log (pause.created) as done by {actor}, with the reason: {reason}")
    return Said(headline, details, caught)


async def describe_resume(rt: Runtime, pause_id: str, *, actor: str) -> Said | None:
    """The confirmation of ending a pause (or the kill switch, `KILL_SWITCH`); None: no such pause holding now."""
    held = await rt.repo.held()
    if pause_id == KILL_SWITCH:
        flag = await rt.repo.get_flag(PAUSE_FLAG) or {}
        alls = [p for p in await rt.repo.active_pauses() if p.everything]
        if not flag.get("paused") and not alls:
            return None
        setter = flag.get("by")
        by = (f" (set by {who(setter if isinstance(setter, str) else None)}: "
              f"{flag.get('reason') or 'no reason given'})") if flag.get("paused") else ""
        caught = [_line(h) for h in held if (h.state_reason or "").startswith("controller is paused")
                  or any(f"(pause {p.id}," in (h.state_reason or "") for p in alls)]
        details = ["Steps start again everywhere no other pause holds; held remediations are looked at again."]
        if alls:
            details.append(f"This also ends {len(alls)} pause(s) of scope all: "
                           + "; ".join(f"{p.id} by {who(p.created_by)}: {p.reason}" for p in alls))
        details.append(f"Recorded in the audit log (controller.resumed) as done by {actor}.")
        return Said(f"Lift the kill switch{by} now.", details, caught)
    pause = next((p for p in await rt.repo.active_pauses() if p.id == pause_id), None)
    if pause is None:
        return None
    until = f", until {pause.ends_at.strftime('%Y-%m-%d %H:%M UTC')}" if pause.ends_at else ""
    caught = [_line(h) for h in held if f"(pause {pause.id}," in (h.state_reason or "")]
    return Said(
        f"End the pause {scope_words(pause.nodes, pause.selector, pause.playbooks)} (by {who(pause.created_by)}: "
        f"{pause.reason}{until}) now.",
        ["The remediations it holds go on at their next step, unless another pause or a guardrail holds them.",
         f"Recorded in the audit log (pause.ended) as done by {actor}."],
        caught,
    )
