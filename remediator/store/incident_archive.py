"""One incident record as a postmortem archive (tar.gz), and the check of its audit chain segment.

The controller answers `GET /api/v1/remediations/{id}/record` with the whole record of one remediation (JSON);
`GET /api/v1/remediations/{id}/bundle` and `remediator bundle ID` pack that same record with `pack` into one
archive, so the archive a person downloads with curl and the one the CLI writes hold the same files:

    README.md            what each file is and how to verify the audit segment
    manifest.json        every file's SHA-256, the remediation id, the definitions version, when it was made
    remediation.json     the remediation (state, reason, plan, params, escalation, return request, versions)
    timeline.json        what happened, oldest first (audit events and step starts/ends, one line each)
    steps.json           every step with its params, output and error, whole
    agent-readings.json  what the node agent reported to the steps (their outputs, e.g. GPU validation)
    approvals.json       the approval requests and their decisions
    alerts.json          the stored alert payloads that started or joined the remediation (labels, annotations)
    node.json            the node as recorded in the remediation's context, and as it is now when the controller
                         has a cluster
    pods.json            the pods on the node as recorded in the context
    audit.jsonl          the remediation's audit rows, one JSON object a line
    audit-segment.jsonl  every audit row from the remediation's first to its last (the chain is global, so the
                         rows of other remediations in between are needed to check the links)
    definitions.json     the definitions version (rule and playbook hashes) the remediation ran with

Pure: no I/O besides building bytes, so the CLI and the API share it.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from remediator.store.audit import Checkpoint, checkpoint_mac, walk_chain

__all__ = ["FORMAT", "README", "archive_name", "audit_line", "pack", "verify_segment"]

FORMAT = "gpu-remediator incident record 1"

README = """# Incident record of remediation {rem_id}

Made {generated_at} by gpu-remediator {version} from {source}.
State: {state}. Playbook: {playbook}. Target: {target}. Definitions version: {definitions_version}.

manifest.json lists every file with its SHA-256 (`sha256sum -c` reads `sha256sums.txt`).

## Verify the audit rows

`audit.jsonl` holds the remediation's audit rows; `audit-segment.jsonl` every row from its first to its last
({first} to {last}), because each row's `prev_hash` is the hash of the row before it in the whole log.

    remediator audit verify --segment audit-segment.jsonl

with the controller's key set (REMEDIATOR_AUDIT_KEY or REMEDIATOR_AUDIT_KEY_FILE) checks that every row of the
segment matches its HMAC-SHA256 and links to the one before. Without the key only plain SHA-256 hashes (rows
written before a key was set) can be checked. Then compare the segment's last row with an anchor kept
elsewhere (`remediator audit head`, logged by the controller), or check it against the live log:

    remediator audit verify --anchor {head}

on the controller's database proves the log still holds the segment's last row with that hash.
"""


def audit_line(event: Mapping[str, object]) -> str:
    """One audit row as one JSON line, its timestamp in ISO 8601 with a UTC offset (`+00:00`)."""
    row = dict(event)
    row["ts"] = utc_iso(row.get("ts"))
    return json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)


def utc_iso(value: object) -> str | None:
    """A timestamp (datetime or ISO text; naive means UTC) as ISO 8601 with `+00:00`."""
    if value is None:
        return None
    ts = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    ts = ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)
    return ts.isoformat()


def archive_name(rem_id: str) -> str:
    return f"remediation-{rem_id}.tar.gz"


def _json(value: object) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n").encode()


def _lines(rows: Iterable[Mapping[str, object]]) -> bytes:
    return "".join(audit_line(r) + "\n" for r in rows).encode()


def pack(record: Mapping[str, Any]) -> bytes:
    """The record (as `GET .../record` answers it) as a gzip'd tar archive under `remediation-<id>/`."""
    rem = record["remediation"]
    rem_id = str(rem["id"])
    segment = record.get("audit_segment") or {}
    events = list(segment.get("events") or [])
    head = f"{events[-1]['id']}:{events[-1]['hash']}" if events else "SEQ:HASH"
    steps = list(rem.get("steps") or [])
    whole = {k: v for k, v in rem.items() if k != "steps"}
    files: dict[str, bytes] = {
        "remediation.json": _json(whole),
        "timeline.json": _json(record.get("timeline") or []),
        "steps.json": _json(steps),
        "agent-readings.json": _json(record.get("agent_readings") or []),
        "approvals.json": _json(record.get("approvals") or []),
        "alerts.json": _json(record.get("alerts") or []),
        "node.json": _json(record.get("node") or {}),
        "pods.json": _json(record.get("pods") or []),
        "audit.jsonl": _lines(record.get("audit") or []),
        "audit-segment.jsonl": _lines(events),
        "definitions.json": _json(record.get("definitions") or {}),
    }
    files["README.md"] = README.format(
        rem_id=rem_id, generated_at=record.get("generated_at"), version=record.get("controller_version"),
        source=record.get("source") or "the controller's API", state=rem.get("state"), playbook=rem.get("playbook"),
        target=rem.get("target"), definitions_version=rem.get("definitions_version"),
        first=segment.get("first_id"), last=segment.get("last_id"), head=head,
    ).encode()
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
    files["manifest.json"] = _json({
        "format": FORMAT, "remediation_id": rem_id, "generated_at": record.get("generated_at"),
        "controller_version": record.get("controller_version"),
        "definitions_version": rem.get("definitions_version"), "audit_segment": {
            "first_id": segment.get("first_id"), "last_id": segment.get("last_id"), "head": head,
        },
        "sha256": sums,
    })
    files["sha256sums.txt"] = "".join(f"{digest}  {name}\n" for name, digest in sums.items()).encode()
    stamp = _mtime(record.get("generated_at"))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"remediation-{rem_id}/{name}")
            info.size, info.mtime, info.mode = len(data), stamp, 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _mtime(value: object) -> int:
    try:
        iso = utc_iso(value)
    except ValueError:
        return 0
    return int(datetime.fromisoformat(iso).timestamp()) if iso else 0


class _Row:
    """An audit row read back from a JSON line, with the attributes walk_chain reads."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.id = int(raw["id"])
        self.ts = datetime.fromisoformat(str(raw["ts"]).replace("Z", "+00:00")).astimezone(UTC).replace(tzinfo=None)
        self.remediation_id = raw.get("remediation_id")
        self.kind = str(raw["kind"])
        self.actor = str(raw["actor"])
        self.data = raw.get("data") or {}
        self.prev_hash = str(raw["prev_hash"])
        self.hash = str(raw["hash"])


def verify_segment(lines: Iterable[str], key: bytes | None) -> tuple[bool, str]:
    """Check a run of consecutive audit rows (JSON lines): each matches its hash (HMAC under `key`) and links to
    the row before; the first is taken to follow whatever its `prev_hash` names."""
    rows: list[_Row] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(_Row(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            return False, f"line {number}: not an audit row ({type(exc).__name__}: {exc})"
    if not rows:
        return False, "the segment holds no audit rows"
    ids = [r.id for r in rows]
    if ids != list(range(ids[0], ids[0] + len(ids))):
        missing = sorted(set(range(ids[0], ids[-1] + 1)) - set(ids))
        return False, f"the segment is not consecutive: rows {missing[:10]} are missing or it is out of order"
    start = Checkpoint(ids[0] - 1, rows[0].prev_hash, checkpoint_mac(ids[0] - 1, rows[0].prev_hash, key))
    report = walk_chain(rows, key=key, checkpoint=start if ids[0] > 1 else None)
    if report.problem is not None:
        return False, f"audit event {report.problem.event_id}: {report.problem.reason}"
    keyed = "(UNKEYED: set REMEDIATOR_AUDIT_KEY to check the HMACs)" if key is None else (
        f"({report.unkeyed} written before the audit key was set)" if report.unkeyed else "(HMAC under the key)"
    )
    return True, (f"ok: audit events {ids[0]} to {ids[-1]} ({len(rows)}) match their hashes and link up {keyed}; "
                  f"last {ids[-1]}:{rows[-1].hash}")
