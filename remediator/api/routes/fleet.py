"""The fleet view: `GET /fleet` (UI page) and `GET /api/v1/fleet` (JSON, bearer token).

Every GPU node of the node inventory with its GPUs' health, and the nodes and GPUs the controller holds or
changed (quarantined as the node's taints and cordon say, power-capped, awaiting approval, held, remediated in
the last 24 hours) with counts; at the top who paused the controller and why, and the circuit breaker's
headroom against the real fleet, so an on-call engineer sees at a glance how much of the fleet is out of
service and how many more quarantines may start (engine/fleet.py says how each is derived).
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse, Response
from pydantic import JsonValue

from remediator.api.deps import Auth, RuntimeDep
from remediator.api.query_check import KnownQuery
from remediator.api.routes.storm_ui import storm_overview
from remediator.api.schemas import as_utc
from remediator.api.signin import SignedIn, require_sign_in
from remediator.api.templating import page
from remediator.api.ui_facts import display_state
from remediator.domain.json_values import JsonObject, jsonable
from remediator.engine.fleet import Fleet, NodeRow, fleet_view
from remediator.store.models import Remediation

__all__ = ["api_router", "router"]

api_router = APIRouter(prefix="/api/v1", dependencies=[Auth], tags=["fleet"])
router = APIRouter(tags=["ui"], include_in_schema=False, dependencies=[Depends(require_sign_in)])


def _rem(rem: Remediation) -> JsonObject:
    return {
        "id": rem.id, "playbook": rem.playbook, "state": display_state(rem), "gpu_uuid": rem.gpu_uuid,
        "gpu_index": rem.gpu_index, "created_at": as_utc(rem.created_at).isoformat(),
        "finished_at": as_utc(rem.finished_at).isoformat() if rem.finished_at else None,
        "reason": rem.state_reason,
    }


def _gpus(n: NodeRow) -> JsonObject | None:
    f = n.facts
    if f is None:
        return None
    return {"health": n.gpu_health, "gpus": f.gpus, "allocatable": f.gpus_allocatable, "condition": f.gpu_healthy,
            "cordoned": f.unschedulable, "taints": [*n.quarantine_taints]}


def _pauses(guardrails: Mapping[str, object]) -> JsonObject:
    return {
        "all": {"paused": True, "by": _text(guardrails.get("paused_by")),
                "reason": _text(guardrails.get("paused_reason"))}
        if guardrails.get("paused") else None,
        "scoped": [jsonable(p) for p in _items(guardrails.get("pauses"))],
    }


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def fleet_json(fleet: Fleet) -> JsonObject:
    return {
        "counts": {**fleet.counts},
        "headroom": fleet.headroom,
        "window_seconds": fleet.window.total_seconds(),
        "inventory": fleet.inventory,
        "pauses": _pauses(fleet.guardrails),
        "elsewhere": [{**_rem(r), "target": r.target_key} for r in fleet.elsewhere],
        "nodes": [
            {
                "node": n.node,
                "flags": [*n.flags],
                "in_quarantine": n.in_quarantine,
                "gpus": _gpus(n),
                "quarantined": [_rem(r) for r in n.quarantined],
                "capped_gpus": {gpu: _rem(r) for gpu, r in n.capped_gpus.items()},
                "awaiting_approval": [_rem(r) for r in n.awaiting],
                "held": [_rem(r) for r in n.held],
                "recent": [_rem(r) for r in n.recent],
            }
            for n in fleet.nodes
        ],
    }


@api_router.get("/fleet", dependencies=[KnownQuery])
async def fleet_api(rt: RuntimeDep) -> dict[str, JsonValue]:
    return fleet_json(await fleet_view(rt))


@router.get("/fleet", response_class=HTMLResponse)
async def fleet_page(rt: RuntimeDep, who: SignedIn) -> Response:
    fleet = await fleet_view(rt)
    return page("fleet.html", {
        "nav_here": "/fleet", "signed_in": who, "fleet": fleet, "banner": fleet.guardrails, "refresh": 30,
        "state_of": display_state, "storms": await storm_overview(rt),
    })
