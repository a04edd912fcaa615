"""The whole record of one remediation, for `describe -o json|yaml` and the postmortem bundle.

`GET /api/v1/remediations/{id}/record` answers it as JSON; `GET .../bundle` packs the same record into a tar.gz
(remediator/store/incident_archive.py). Nothing in it is cut: every step with its output, every audit row of the
remediation with the chain segment that verifies them, every approval request, every stored alert payload that
started or joined it, the node and pods as the context recorded them (and the node as it is now, when the
controller has a cluster), and the definitions version it ran with.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from remediator import __version__
from remediator.api.schemas import alert_out, approval_out, audit_out, detail_out
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.engine.return_gate import stored_gate
from remediator.engine.runtime import Runtime
from remediator.errors import RemediatorError
from remediator.store.incident_archive import FORMAT, utc_iso
from remediator.store.models import Remediation

__all__ = ["SEGMENT_LIMIT", "build_record"]

log = logging.getLogger(__name__)

# At most this many audit rows in the chain segment (a remediation open for months in a busy fleet).
SEGMENT_LIMIT = 200_000


async def build_record(rt: Runtime, rem: Remediation) -> JsonObject:
    repo = rt.repo
    step_rows = await repo.steps(rem.id)
    gate = [g.as_dict() for g in stored_gate(rt.actions, rem, step_rows)]  # as GET /api/v1/remediations/{id} says
    detail_model = detail_out(rem, step_rows, await repo.current_approval(rem.id), gate)
    detail: JsonObject = detail_model.model_dump(mode="json")
    steps: list[JsonObject] = [s.model_dump(mode="json") for s in detail_model.steps]
    audit_rows = [audit_out(e) for e in await repo.list_audit(remediation_id=rem.id, limit=10**9)]
    audit: list[JsonObject] = [e.model_dump(mode="json") for e in audit_rows]
    now = repo.clock()
    approvals: list[JsonValue] = [approval_out(a, r, now).model_dump(mode="json")
                                  for a, r in await repo.list_approvals(remediation_id=rem.id, limit=100000)]
    alerts: list[JsonValue] = [alert_out(a).model_dump(mode="json") for a in await repo.alerts_of(rem.id)]
    events: list[JsonObject] = []
    segment: JsonObject = {"first_id": None, "last_id": None}
    if audit_rows:
        first, last = audit_rows[0].id, audit_rows[-1].id
        segment = {"first_id": first, "last_id": last}
        if last - first < SEGMENT_LIMIT:
            events = [audit_out(e).model_dump(mode="json") for e in await repo.audit_between(first, last)]
        else:
            segment["left_out"] = f"more than {SEGMENT_LIMIT} rows; export them with remediator audit export"
    for rows in (audit, events):
        for row in rows:
            row["ts"] = utc_iso(row["ts"])
    segment = {"first_id": segment["first_id"], "last_id": segment["last_id"], "events": list(events),
               **{k: v for k, v in segment.items() if k == "left_out"}}
    context = dict(rem.context or {})
    return {
        "format": FORMAT,
        "generated_at": datetime.now(UTC).isoformat(),
        "controller_version": __version__,
        "remediation": detail,
        "timeline": list(_timeline(steps, audit)),
        "audit": list(audit),
        "audit_segment": segment,
        "approvals": approvals,
        "alerts": alerts,
        "node": {"recorded": context.get("node"), **await _live_node(rt, rem.node)},
        "pods": context.get("pods") or [],
        "agent_readings": [
            {"phase": s["phase"], "index": s["index"], "name": s["name"], "action": s["action"],
             "status": s["status"], "finished_at": s["finished_at"], "output": s["output"]}
            for s in steps if s.get("output")
        ],
        "definitions": {
            "version": rem.definitions_version, "versions": detail.get("versions") or {},
            "see": f"/api/v1/definitions/{rem.definitions_version}" if rem.definitions_version else None,
        },
    }


def _timeline(steps: list[JsonObject], audit: list[JsonObject]) -> list[JsonObject]:
    """What happened, oldest first: the audit events and each step's start and end."""
    entries: list[JsonObject] = [
        {"ts": e["ts"], "what": e["kind"], "actor": e["actor"], "source": f"audit {e['id']}"} for e in audit
    ]
    for s in steps:
        step = f"{s['phase']} step {s['index']} {s['name']} ({s['action']})"
        if s.get("started_at"):
            entries.append({"ts": utc_iso(s["started_at"]), "what": f"{step} started", "actor": "controller",
                            "source": "steps"})
        if s.get("finished_at"):
            entries.append({"ts": utc_iso(s["finished_at"]), "what": f"{step} {s['status']}",
                            "actor": "controller", "source": "steps", "error": s.get("error")})
    return sorted(entries, key=lambda e: str(e["ts"]))


async def _live_node(rt: Runtime, name: str | None) -> JsonObject:
    """The node as the API server has it now (only when the controller has a cluster)."""
    if rt.kube is None:
        return {"live": None, "live_note": "the controller has no cluster (plan-only): only the recorded context"}
    if not name:
        return {"live": None, "live_note": "the remediation names no node"}
    try:
        node = await rt.kube.get_node(name)
    except (RemediatorError, OSError) as exc:
        log.info("incident record: reading node %s failed: %s", name, exc)
        return {"live": None, "live_note": f"reading the node failed: {exc}"}
    node = dict(node)
    meta = node.get("metadata")
    node["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"} if isinstance(meta, dict) else {}
    return {"live": node, "live_read_at": datetime.now(UTC).isoformat()}
