"""What the guardrails look like right now, for the API and the UI banner."""

from __future__ import annotations

from typing import Any

from remediator.engine.runtime import Runtime
from remediator.store.flag_store import PAUSE_FLAG

__all__ = ["guardrail_status"]


async def guardrail_status(rt: Runtime) -> dict[str, Any]:
    settings = rt.settings
    flag = await rt.repo.get_flag(PAUSE_FLAG) or {}
    nodes, recent = await rt.repo.quarantine_status(rt.clock() - settings.quarantine_rate_window)
    quarantined = sorted(nodes)
    held = await rt.repo.held()
    limit = settings.quarantine_limit.resolve(rt.gpu_nodes)
    tripped = any((h.state_reason or "").startswith(("circuit breaker", "rate limit")) for h in held)
    pauses = await rt.repo.list_pauses()
    return {
        "pauses": pauses,  # the scoped, timed pauses holding now (domain/pauses.py)
        "paused": bool(flag.get("paused")),
        "paused_by": flag.get("by"),
        "paused_reason": flag.get("reason") if flag.get("paused") else None,
        "plan_only": rt.plan_only,
        "circuit_breaker": {
            "tripped": tripped,
            "quarantined_nodes": quarantined,
            "quarantined": len(quarantined),
            "limit": limit,
            "limit_setting": settings.max_quarantined_nodes,
            "gpu_nodes": rt.gpu_nodes,
        },
        "rate_limit": {
            "window": settings.quarantine_rate_window.total_seconds(),
            "limit": settings.quarantine_rate,
            "recent": recent,
        },
        "held": [
            {"id": h.id, "node": h.node, "playbook": h.playbook, "reason": h.state_reason} for h in held
        ],
    }
