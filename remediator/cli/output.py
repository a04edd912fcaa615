"""How the operator commands print what the controller's API returned: kubectl-style tables, JSON, YAML and
`describe` text. Pure functions of the API's JSON (and the current time), so they are tested without a server.
The text forms expect data already made terminal-safe (remediator.cli.terminal.printable, applied by the commands);
JSON and YAML are exact, and never carry a character a terminal would act on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import yaml

from remediator.cli.terminal import UNSAFE
from remediator.domain.silences import SilenceMatcher, matcher_text
from remediator.domain.states import ACTIVE_STATES
from remediator.domain.timestamps import as_utc

__all__ = [
    "NODE_LABELS",
    "RESOURCES",
    "age",
    "describe_remediation",
    "parse_ts",
    "render",
    "short_id",
    "table",
]

# Labels that name an alert's node, in the controller's default precedence (REMEDIATOR_NODE_LABEL_PRECEDENCE).
NODE_LABELS = ("node", "kubernetes_node", "Hostname", "hostname", "instance")
SHORT_ID = 8
REASON_WIDTH = 60

Row = Mapping[str, object]  # one object of an API answer, read through the narrowing helpers here
Column = tuple[str, Callable[[Row, datetime], str]]


def parse_ts(value: object) -> datetime | None:
    """An ISO timestamp of the API (naive ones are UTC), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        ts = datetime.fromisoformat(value)
    except ValueError:
        return None
    return as_utc(ts)


def age(value: object, now: datetime) -> str:
    """How long ago, the way kubectl prints an AGE column: 45s, 3m20s, 12m, 5h3m, 20h, 3d4h, 40d, 2y10d."""
    ts = parse_ts(value)
    if ts is None:
        return "<unknown>"
    seconds = int((now - ts).total_seconds())
    if seconds < 0:
        return "0s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years, rest_days = days // 365, days % 365
    if years < 8:
        return f"{years}y{rest_days}d" if rest_days else f"{years}y"
    return f"{years}y"


def utc(value: object) -> str:
    """A timestamp as `YYYY-MM-DD HH:MM:SS` UTC, or '-'."""
    ts = parse_ts(value)
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def short_id(value: object) -> str:
    return str(value or "")[:SHORT_ID] or "-"


def truncate(value: object, width: int = REASON_WIDTH) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns three spaces apart, the way kubectl prints them (no trailing blanks)."""
    cells = [list(headers), *[[c or "-" for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _node_of_labels(labels: object) -> str:
    if isinstance(labels, dict):
        for key in NODE_LABELS:
            if labels.get(key):
                return str(labels[key])
    return ""


def _obj(value: object) -> Row:
    """A JSON object of the answer, or an empty one for anything else."""
    return value if isinstance(value, Mapping) else {}


def _items(value: object) -> list[object]:
    """The items of a JSON list of the answer, or none for anything else."""
    return list(value) if isinstance(value, list | tuple) else []


def _objs(value: object) -> list[Row]:
    """The JSON objects of a list of the answer."""
    return [item for item in _items(value) if isinstance(item, Mapping)]


def _int(value: object) -> int:
    """A JSON number (or digits) of the answer; 0 for none."""
    return int(value) if isinstance(value, int | float | str) and value else 0


def _gpu(row: Row) -> str:
    uuid, index = row.get("gpu_uuid"), row.get("gpu_index")
    if uuid and index not in (None, ""):
        return f"{uuid} ({index})"
    return str(uuid or index or "")


def _field(name: str) -> Callable[[Row, datetime], str]:
    return lambda row, _now: "" if row.get(name) is None else str(row.get(name))


_GPU_UUID = re.compile(r"\b(GPU-[0-9a-fA-F]{8})[0-9a-fA-F-]{28}\b")
NARROW_WIDTH = 120  # the plain `get remediations` fits this many columns; `-o wide` shows everything whole


def short_target(value: object) -> str:
    """A target with its GPU UUID cut to the first 8 hex digits (`gpu-node-1/GPU-8e6a1c2d`)."""
    return _GPU_UUID.sub(r"\1", str(value or ""))


_REMEDIATIONS: list[Column] = [
    ("ID", lambda r, _n: short_id(r.get("id"))),
    ("STATE", _field("state")),
    ("PLAYBOOK", _field("playbook")),
    ("TARGET", lambda r, _n: short_target(r.get("target"))),
    ("AGE", lambda r, n: age(r.get("created_at"), n)),
    ("REASON", lambda r, _n: truncate(r.get("state_reason") or r.get("error"))),
]
_REMEDIATIONS_WIDE: list[Column] = [
    ("ID", _field("id")),
    ("STATE", _field("state")),
    ("PLAYBOOK", _field("playbook")),
    ("TARGET", _field("target")),
    ("AGE", lambda r, n: age(r.get("created_at"), n)),
    ("REASON", lambda r, _n: truncate(r.get("state_reason") or r.get("error"), 200)),
    ("RULE", _field("rule")),
    ("GPU", lambda r, _n: _gpu(r)),
    ("ALERTNAME", _field("alertname")),
    ("CREATED (UTC)", lambda r, _n: utc(r.get("created_at"))),
]
_APPROVALS: list[Column] = [
    ("REMEDIATION", lambda r, _n: short_id(r.get("remediation_id"))),
    ("STATUS", _field("status")),
    ("STEP", _field("step_name")),
    ("PLAYBOOK", _field("playbook")),
    ("TARGET", _field("target")),
    ("AGE", lambda r, n: age(r.get("created_at"), n)),
    ("DECIDED BY", _field("decided_by")),
]
_APPROVALS_WIDE: list[Column] = [
    ("REMEDIATION", _field("remediation_id")),
    *_APPROVALS[1:],
    ("RULE", _field("rule")),
    ("GPU", lambda r, _n: _gpu(r)),
    ("ALERTNAME", _field("alertname")),
    ("CREATED (UTC)", lambda r, _n: utc(r.get("created_at"))),
    ("EXPIRES (UTC)", lambda r, _n: utc(r.get("expires_at"))),
]
_ALERTS: list[Column] = [
    ("ID", _field("id")),
    ("ALERTNAME", _field("alertname")),
    ("STATUS", _field("status")),
    ("NODE", lambda r, _n: _node_of_labels(r.get("labels"))),
    ("OUTCOME", lambda r, _n: _outcome(r)),
    ("REMEDIATION", lambda r, _n: short_id(r.get("remediation_id")) if r.get("remediation_id") else ""),
    ("AGE", lambda r, n: age(r.get("received_at"), n)),
]
_ALERTS_WIDE: list[Column] = [
    *_ALERTS,
    ("GPU", lambda r, _n: str(_obj(r.get("labels")).get("UUID") or _obj(r.get("labels")).get("gpu") or "")),
    ("FINGERPRINT", _field("fingerprint")),
    ("RECEIVED (UTC)", lambda r, _n: utc(r.get("received_at"))),
    ("NOTE", lambda r, _n: truncate(_silence_note(r), 160) if r.get("silence") else truncate(r.get("note"))),
]
_SILENCES: list[Column] = [
    ("ID", _field("id")),
    ("MATCHERS", lambda r, _n: " ".join(_matcher(m) for m in _items(r.get("matchers")))),
    ("STATE", lambda r, _n: str(_obj(r.get("status")).get("state") or "")),
    ("STARTS (UTC)", lambda r, _n: utc(r.get("startsAt"))),
    ("ENDS (UTC)", lambda r, _n: utc(r.get("endsAt"))),
    ("CREATED BY", _field("createdBy")),
    ("COMMENT", lambda r, _n: truncate(r.get("comment"))),
]
_SILENCES_WIDE: list[Column] = [
    *_SILENCES[:-1],
    ("ACTOR", _field("actor")),
    ("EXPIRED BY", _field("expiredBy")),
    ("COMMENT", lambda r, _n: truncate(r.get("comment"), 200)),
]


def _outcome(row: Row) -> str:
    silence = row.get("silence")
    if isinstance(silence, dict) and silence.get("id"):
        return f"silenced ({short_id(silence['id'])})"
    return str(row.get("outcome") or ("pending" if row.get("state") == "new" else ""))


def _silence_note(row: Row) -> str:
    """The silence that held an alert: its id, author and comment."""
    silence = row.get("silence")
    if not isinstance(silence, dict) or not silence.get("id"):
        return ""
    return f"silence {silence['id']} by {silence.get('createdBy')}: {silence.get('comment')}"


def _matcher(m: object) -> str:
    """A matcher as amtool writes it: name, operator, quoted value."""
    if not isinstance(m, Mapping):
        return str(m)
    try:
        return matcher_text(SilenceMatcher.of(m))
    except (KeyError, TypeError, AttributeError):
        return str(m)


RESOURCES: dict[str, tuple[list[Column], list[Column]]] = {
    "remediations": (_REMEDIATIONS, _REMEDIATIONS_WIDE),
    "approvals": (_APPROVALS, _APPROVALS_WIDE),
    "alerts": (_ALERTS, _ALERTS_WIDE),
    "silences": (_SILENCES, _SILENCES_WIDE),
}


def dump(data: object, output: str) -> str:
    """`data` as exact JSON or YAML. Non-ASCII text is written as it is unless some string holds a character a
    terminal would act on (C1 controls, bidi overrides...): then every non-ASCII character is an escape, which
    reads back to the same data."""
    for ascii_only in (False, True):
        if output == "yaml":
            text = yaml.safe_dump(
                data, sort_keys=False, allow_unicode=not ascii_only, default_flow_style=False
            ).rstrip("\n")
        else:
            text = json.dumps(data, indent=2, ensure_ascii=ascii_only)
        if not UNSAFE.search(text.replace("\n", "")):
            break
    return text


def render(resource: str, rows: list[Row], output: str, now: datetime) -> str:
    """`rows` of one resource as a table (`output` '' or 'wide'), JSON or YAML."""
    if output in ("json", "yaml"):
        return dump(rows, output)
    if not rows:
        return f"No {resource} found."
    narrow, wide = RESOURCES[resource]
    columns = wide if output == "wide" else narrow
    cells = [[fn(r, now) for _, fn in columns] for r in rows]
    if resource == "remediations" and output != "wide":
        cells = _fit_last(narrow, cells, NARROW_WIDTH)
    return table([c[0] for c in columns], cells)


def _fit_last(columns: Sequence[Column], cells: list[list[str]], width: int) -> list[list[str]]:
    """Cut the last column (the reason) so that each line of the table fits `width` characters."""
    before = [max(len(columns[i][0]), *(len(r[i] or "-") for r in cells)) for i in range(len(columns) - 1)]
    room = max(width - sum(before) - 3 * (len(columns) - 1), len(columns[-1][0]))
    return [[*r[:-1], truncate(r[-1], room) if len(r[-1]) > room else r[-1]] for r in cells]


def _pairs(pairs: Sequence[tuple[str, object]], indent: str = "") -> list[str]:
    shown = [(k, v) for k, v in pairs if v not in (None, "", [], {})]
    width = max((len(k) for k, _ in shown), default=0) + 2
    return [f"{indent}{(k + ':').ljust(width)}{v}" for k, v in shown]


def _mapping(title: str, values: object) -> list[str]:
    if not isinstance(values, dict) or not values:
        return [f"{title}:  <none>"]
    return [f"{title}:", *(f"  {k}={v}" for k, v in sorted(values.items()))]


def _steps(rem: Row) -> list[str]:
    rows = _objs(rem.get("steps"))
    forward = {s.get("index"): s for s in rows if s.get("phase") == "forward"}
    lines: list[list[str]] = []
    planned = _objs(rem.get("planned_steps"))
    for plan in planned:
        done = forward.pop(plan.get("index"), None) or {}
        gate = "required" if plan.get("approval") else ""
        lines.append([
            "forward", str(plan.get("index")), str(plan.get("name") or ""), str(plan.get("action") or ""),
            str(done.get("status") or "not run"), str(done.get("attempts") or ""), gate,
            truncate(done.get("error"), 80),
        ])
    for step in [*forward.values(), *(s for s in rows if s.get("phase") != "forward")]:
        lines.append([
            str(step.get("phase")), str(step.get("index")), str(step.get("name") or ""), str(step.get("action") or ""),
            str(step.get("status") or ""), str(step.get("attempts") or ""), "", truncate(step.get("error"), 80),
        ])
    if not lines:
        return ["Steps:  <none>"]
    body = table(["PHASE", "#", "NAME", "ACTION", "STATUS", "ATTEMPTS", "APPROVAL", "ERROR"], lines)
    return ["Steps:", *("  " + line for line in body.splitlines())]


def _return_gate(rem: Row) -> list[str]:
    """What must happen before the target returns to service, in order (the playbook's return gate)."""
    gate: list[Row] = [g for g in _items(rem.get("return_gate")) if isinstance(g, dict)]
    if not gate:
        return ["Return gate:  <none> (the undo runs as soon as the return starts)"]
    lines = ["Return gate (before the node returns to service):"]
    for g in gate:
        status = f" [{g.get('status')}]" if g.get("status") else ""
        lines.append(f"  {_int(g.get('index')) + 1}. {g.get('name')} ({g.get('action')}){status}: {g.get('says')}")
    return lines


def _approvals(rem: Row, approvals: list[Row], now: datetime) -> list[str]:
    if not approvals:
        return []
    lines = ["Approvals:"]
    for a in sorted(approvals, key=lambda x: _int(x.get("id"))):
        step = f"step {a.get('step_index')} ({a.get('step_name')})"
        if a.get("status") == "pending":
            expires = parse_ts(a.get("expires_at"))
            left = f"expires {utc(a.get('expires_at'))} UTC"
            if expires is not None and expires > now:
                left += f" (in {age(now.isoformat(), expires)})"
            lines.append(f"  {step}: pending, asked {age(a.get('created_at'), now)} ago; {left}")
        else:
            by = f" by {a.get('decided_by')}" if a.get("decided_by") else ""
            source = f" ({a.get('decision_source')})" if a.get("decision_source") else ""
            lines.append(f"  {step}: {a.get('status')}{by} at {utc(a.get('decided_at'))} UTC{source}")
    return lines


def _event_details(data: object) -> str:
    if not isinstance(data, dict) or not data:
        return ""
    return truncate(", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in data.items()), 100)


def describe_remediation(rem: Row, events: list[Row], approvals: list[Row], now: datetime) -> str:
    """One remediation the way `kubectl describe` shows an object: fields, labels, steps, then events."""
    created = rem.get("created_at")
    versions = rem.get("versions") or {}
    lines = _pairs([
        ("ID", rem.get("id")),
        ("State", rem.get("state")),
        ("Reason", rem.get("state_reason")),
        ("Error", rem.get("error")),
        ("Crashes", rem.get("crashes") or None),
        ("Rule", rem.get("rule")),
        ("Playbook", rem.get("playbook")),
        ("Target", rem.get("target")),
        ("Node", rem.get("node")),
        ("GPU", _gpu(rem)),
        ("Namespace", rem.get("namespace")),
        ("Alert", f"{rem.get('alertname')} ({'resolved' if rem.get('alert_resolved') else 'firing'}), "
                  f"{rem.get('linked_alerts') or 0} more linked"),
        ("Phase", f"{rem.get('phase')}, step {rem.get('current_step')}"),
        ("Created", f"{utc(created)} UTC ({age(created, now)} ago)"),
        ("Updated", f"{utc(rem.get('updated_at'))} UTC"),
        ("Finished", f"{utc(rem.get('finished_at'))} UTC"
         if rem.get("finished_at") and rem.get("state") not in ACTIVE_STATES else None),
        ("Decision", f"{rem.get('decision')} by {rem.get('decided_by')}" if rem.get("decision") else None),
        ("Versions", ", ".join(f"{k}={v}" for k, v in versions.items() if v) if isinstance(versions, dict) else None),
    ])
    lines += _mapping("Alert labels", rem.get("alert_labels"))
    lines += _steps(rem)
    lines += _return_gate(rem)
    escalation = rem.get("escalation")
    if isinstance(escalation, dict) and escalation:
        lines.append("Escalation:")
        lines += _pairs([(str(k), json.dumps(v, default=str) if isinstance(v, dict | list) else v)
                         for k, v in escalation.items()], indent="  ")
    lines += _approvals(rem, approvals, now)
    if events:
        rows = [[age(e.get("ts"), now), str(e.get("kind")), str(e.get("actor")), _event_details(e.get("data"))]
                for e in events]
        lines += ["Events:", *("  " + line for line in table(["AGE", "KIND", "ACTOR", "DETAILS"], rows).splitlines())]
    else:
        lines.append("Events:  <none>")
    return "\n".join(lines)
