"""A person's forced return to service (`remediator return`, `POST /api/v1/remediations/{id}/return`): the words
and the small rules it is made of, shared by the store (which records the request), the executor (which runs
the undo) and the API, the CLI and the UI (which ask for it and show it). Pure: no I/O.

A return may skip two kinds of return-gate step: `reboot` (a step that waits for the node to run a new boot,
`await_reboot`) and `validation` (a validation gate step, an action with `gate = True` such as `validate_gpu`).
A skipped gate step is recorded `skipped`, with who skipped it and why; every undo step still runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, Literal

__all__ = [
    "REBOOT_ACTIONS", "SKIPS", "Skip", "gate_step_kind", "return_reason", "returned_reason", "skip_of",
    "skipped_note",
]

Skip = Literal["reboot", "validation"]
SKIPS: Final[tuple[Skip, ...]] = ("reboot", "validation")
# Gate actions that wait for a reboot (a `reboot` skip covers them).
REBOOT_ACTIONS: Final[frozenset[str]] = frozenset({"await_reboot"})


def gate_step_kind(action: str, is_gate: bool) -> Skip | None:
    """Which skip covers a return-gate step of this action: `reboot`, `validation`, or None (never skipped)."""
    if action in REBOOT_ACTIONS:
        return "reboot"
    return "validation" if is_gate else None


def _skipped_text(skip: Iterable[str]) -> str:
    names = sorted(set(skip))
    return f"; skipping {' and '.join(names)}" if names else ""


def return_reason(actor: str, reason: str, skip: Iterable[str]) -> str:
    """The state reason while a return runs: who asked, why, what it skips."""
    return f"return to service requested by {actor}: {reason}{_skipped_text(skip)}"


def returned_reason(request: Mapping[str, object]) -> str:
    """The state reason once returned."""
    return f"returned to service by {request.get('actor')}: {request.get('reason')}{_skipped_text(skip_of(request))}"


def skip_of(request: Mapping[str, object] | None) -> frozenset[str]:
    """The skips of a stored return request (none for no request)."""
    if not request:
        return frozenset()
    skip = request.get("skip")
    return frozenset(str(s) for s in (skip if isinstance(skip, list | tuple) else ()) if s in SKIPS)


def skipped_note(request: Mapping[str, object], kind: str) -> str:
    """Why a gate step was skipped, as its step row and the timeline say it."""
    return f"skipped by the return to service {request.get('actor')} asked for ({kind}): {request.get('reason')}"
