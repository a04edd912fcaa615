"""`rma_report`: the replacement (RMA) summary of a GPU that has to go back to the vendor.

The last rung of the escalation ladder: the GPU failed its remediations and its validation gate, and someone
has to open a replacement case. This step gathers what that case needs in one plain-text message: the board
identity read from the node's sidecar (`GET /v1/gpus/{id}/identity`: serial, board part number, VBIOS,
driver, remapped-row counts), the Xid/fault history the playbook passes in, the failed checks of the gate,
and where the bug report lies on the node. It sends the text through the notification service like
`notify` does and returns it, with the same facts as structured fields, in the step output.

A missing serial must not stop the mail: when the sidecar cannot answer (node unreachable, GPU gone, NVML
broken) or NVML cannot read a field, the summary still goes out and says which fields are unknown and why;
the step succeeds. Nothing in the cluster changes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

from pydantic import Field, ValidationError, field_validator

from remediator.actions.base import Action, ActionContext, ActionResult, StrictParams, Target, planned
from remediator.actions.gpu import node_internal_ip, sidecar_client
from remediator.adapters.notifier import Message
from remediator.domain.json_values import JsonObject
from remediator.errors import ActionError
from remediator.kube.views import as_list, as_mapping, json_object
from remediator.sidecar.schemas import GpuIdentity

__all__ = ["GATE_BUDGET", "MAX_HISTORY_ROWS", "MAX_TEXT", "RmaReport", "RmaReportParams", "compose_summary"]

MAX_HISTORY_ROWS = 200
# Slack shows at most 2,900 characters of a message's text: the summary is cut to fit, history rows last.
MAX_TEXT = 2900
_MAX_ROW_JSON = 4096
_MAX_GATE_JSON = 512 * 1024
# Characters of the summary the gate's failed checks may take; the history rows get what is left.
GATE_BUDGET = 1000
_MAX_LINE = 240
_GPU = re.compile(r"^(\d{1,4}|GPU-[0-9a-fA-F-]{8,64})$")
# Identity fields the summary names, with their labels.
_FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "Model"),
    ("serial", "Serial"),
    ("board_part_number", "Board part number"),
    ("vbios_version", "VBIOS"),
    ("driver_version", "Driver"),
    ("pci_bus_id", "PCI bus id"),
    ("remapped_rows", "Remapped rows"),
)
_HISTORY_KEYS = ("at", "alertname", "xid", "playbook", "outcome", "remediation")


def _json_size(value: object) -> int:
    return len(json.dumps(value, default=str))


class RmaReportParams(StrictParams):
    gpu: str | None = Field(
        default=None, description="GPU UUID or index; the remediation's GPU (UUID, else index) when unset."
    )
    history: list[dict[str, object]] = Field(
        default_factory=list,
        max_length=MAX_HISTORY_ROWS,
        description="Xid/fault history, oldest first, at most 200 rows of at most 4 KiB each; keys shown: at, "
        "alertname, xid, playbook, outcome, remediation (other scalar keys as key=value).",
    )
    gate: dict[str, object] | None = Field(
        default=None,
        description="A validation gate's output: `validate_gpu`'s step output (verdict, failed, gpus) or one "
        "sidecar validation report (verdict, failed, checks); its failed checks are listed with their details.",
    )
    bug_report: str | None = Field(
        default=None, max_length=1024, description="Where the bug report lies on the node (a path)."
    )
    channel: str | None = Field(
        default=None, max_length=80, description="Slack channel, for webhooks that may post to several."
    )

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, value: str | None) -> str | None:
        if value is not None and not _GPU.fullmatch(value):
            raise ValueError(f"gpu must be a GPU UUID or an index, got {value[:80]!r}")
        return value

    @field_validator("history")
    @classmethod
    def _history(cls, rows: list[dict[str, object]]) -> list[dict[str, object]]:
        for number, row in enumerate(rows):
            if _json_size(row) > _MAX_ROW_JSON:
                raise ValueError(f"history row {number} is larger than {_MAX_ROW_JSON} characters as JSON")
        return rows

    @field_validator("gate")
    @classmethod
    def _gate(cls, gate: dict[str, object] | None) -> dict[str, object] | None:
        if gate is not None and _json_size(gate) > _MAX_GATE_JSON:
            raise ValueError(f"gate is larger than {_MAX_GATE_JSON} characters as JSON")
        return gate


def _short(text: object, limit: int = 160) -> str:
    shown = " ".join(str(text).split())
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _history_line(row: Mapping[str, object]) -> str:
    parts = [_short(row.get("at") or "time unknown", 40)]
    if row.get("xid") not in (None, ""):
        parts.append(f"Xid {_short(row['xid'], 20)}")
    if row.get("alertname"):
        parts.append(_short(row["alertname"], 80))
    if row.get("playbook"):
        parts.append(f"playbook {_short(row['playbook'], 80)}")
    if row.get("outcome"):
        parts.append(f"outcome {_short(row['outcome'], 40)}")
    if row.get("remediation"):
        parts.append(f"remediation {_short(row['remediation'], 60)}")
    extra = [
        f"{_short(k, 30)}={_short(v, 60)}"
        for k, v in row.items()
        if k not in _HISTORY_KEYS and isinstance(v, str | int | float | bool) and v != ""
    ]
    return _short("- " + ", ".join(parts + extra), _MAX_LINE)


def _gate_failures(gate: Mapping[str, object]) -> tuple[str | None, list[str]]:
    """(verdict, "GPU: check (detail)" for each failed check) of validate_gpu's output or one report."""
    verdict = gate.get("verdict")
    gpus = gate.get("gpus")
    reports: list[object] = gpus if isinstance(gpus, list) else [gate] if "checks" in gate else []
    details: dict[tuple[str, str], str] = {}
    from_reports: dict[str, list[str]] = {}
    for report in reports:
        if not isinstance(report, Mapping):
            continue
        gpu = str(report.get("uuid") or report.get("gpu") or "")
        for check in as_list(report.get("checks")):
            if isinstance(check, Mapping) and check.get("name"):
                details[(gpu, str(check["name"]))] = str(check.get("detail") or "")
        named = report.get("failed")
        if isinstance(named, list):
            from_reports[gpu] = [str(name) for name in named]
    failed = gate.get("failed")
    by_gpu: dict[str, list[str]]
    if isinstance(failed, Mapping):
        by_gpu = {str(gpu): [str(n) for n in names] for gpu, names in failed.items() if isinstance(names, list)}
    elif isinstance(failed, list):
        by_gpu = {str(gate.get("uuid") or gate.get("gpu") or ""): [str(n) for n in failed]}
    else:
        by_gpu = from_reports
    several = len(by_gpu) > 1
    lines = []
    for gpu, names in by_gpu.items():
        for name in names:
            detail = details.get((gpu, name), "")
            line = f"{gpu}: {name}" if several and gpu else name
            lines.append(_short(f"- {line} ({_short(detail)})" if detail else f"- {line}", _MAX_LINE))
    return (str(verdict) if verdict is not None else None), lines


def _remapped(rows: Mapping[str, object]) -> str:
    return (
        f"{rows.get('correctable')} correctable, {rows.get('uncorrectable')} uncorrectable, "
        f"pending: {'yes' if rows.get('pending') else 'no'}, failed remap: {'yes' if rows.get('failure') else 'no'}"
    )


def _fit(lines: list[str], budget: int, noun: str) -> list[str]:
    """As many of `lines` as fit in `budget` characters, then "- … and N more <noun>"."""
    out: list[str] = []
    used = 0
    for number, line in enumerate(lines):
        left = len(lines) - number
        more = f"- … and {left - 1} more {noun}" if left > 1 else ""
        if used + len(line) + 1 + (len(more) + 1 if more else 0) > budget:
            out.append(f"- … and {left} more {noun}")
            break
        out.append(line)
        used += len(line) + 1
    return out


def compose_summary(
    facts: Mapping[str, object], history: Sequence[Mapping[str, object]], failed_checks: list[str]
) -> str:
    """The plain-text RMA summary, at most MAX_TEXT characters: identity first, then the gate's failed checks
    (at most GATE_BUDGET characters of them), the bug report, and as many history rows as still fit."""
    uuid = facts.get("uuid") or facts.get("gpu") or "unknown GPU"
    node = facts.get("node") or "unknown node"
    unknown = as_mapping(facts.get("unknown"))
    lines = [
        f"GPU replacement (RMA) request: {_short(facts.get('name') or 'GPU', 80)} {uuid} on node {node}",
        "",
        f"Node: {node}" + (f" ({facts['node_ip']})" if facts.get("node_ip") else ""),
        f"GPU UUID: {uuid}" + (f" (index {facts['index']})" if facts.get("index") is not None else ""),
    ]
    for key, label in _FIELDS:
        value = facts.get(key)
        if value is None:
            shown = f"unknown ({_short(unknown.get(key, 'not read'), 80)})"
        elif key == "remapped_rows":
            shown = _remapped(as_mapping(value))
        else:
            shown = _short(value, 120)
        lines.append(f"{label}: {shown}")
    if facts.get("retired_pages_pending") is not None:
        lines.append(f"Retired pages pending: {'yes' if facts['retired_pages_pending'] else 'no'}")
    if facts.get("identity_error"):
        lines.append(f"Identity not read from the node: {_short(facts['identity_error'], 300)}")
    if facts.get("remediation_id"):
        lines.append(f"Remediation: {_short(facts['remediation_id'], 80)}")
    lines.append("")
    verdict = facts.get("gate_verdict")
    if failed_checks:
        lines.append(f"Failed validation checks (gate verdict: {_short(verdict or 'unknown', 20)}):")
        lines.extend(_fit(failed_checks, GATE_BUDGET, "failed checks"))
    elif verdict is not None:
        lines.append(f"Validation gate verdict: {_short(verdict, 20)} (no failed checks named)")
    else:
        lines.append("Validation gate: no result given")
    bug_report = facts.get("bug_report")
    lines.append(f"Bug report: {_short(bug_report, 300)} on node {node}" if bug_report else "Bug report: none given")
    lines.append("")
    lines.append(f"Xid/fault history ({len(history)} rows):" if history else "Xid/fault history: none given")
    text = "\n".join(lines)
    rows = _fit([_history_line(row) for row in history], MAX_TEXT - len(text) - 1, "rows (all in the step's input)")
    return "\n".join([text, *rows])[:MAX_TEXT]


class RmaReport(Action[RmaReportParams]):
    """Send the replacement (RMA) summary of a GPU: identity, Xid history, failed checks, bug report."""

    name: ClassVar[str] = "rma_report"
    Params = RmaReportParams
    mutating: ClassVar[bool] = False

    def describe(self, target: Target, params: RmaReportParams) -> str:
        p = params
        gate = ", the gate's failed checks" if p.gate else ""
        where = p.channel or "the configured channels"
        gpu = p.gpu or "the remediation's GPU"
        return (
            f"rma_report({gpu}: identity from the sidecar, "
            f"{len(p.history)} history rows{gate}) to {where} on {target.key}"
        )

    async def plan(self, ctx: ActionContext, params: RmaReportParams) -> ActionResult:
        gpu = params.gpu or ctx.target.gpu_uuid or ctx.target.gpu_index
        return planned("would " + self.describe(ctx.target, params),
                       {"sent": False, "gpu": gpu, "channel": params.channel, "history_rows": len(params.history)})

    async def apply(self, ctx: ActionContext, params: RmaReportParams) -> ActionResult:
        p = params
        gpu = p.gpu or ctx.target.gpu_uuid or ctx.target.gpu_index
        facts: JsonObject = {"node": ctx.target.node, "node_ip": None, "gpu": gpu}
        identity, error = await self._identity(ctx, gpu, facts)
        facts.update(_identity_facts(identity, error, gpu))
        if facts.get("uuid") is None and ctx.target.gpu_uuid and gpu in (ctx.target.gpu_uuid, ctx.target.gpu_index):
            facts["uuid"] = ctx.target.gpu_uuid
        facts["remediation_id"] = ctx.remediation_id
        verdict, failed_checks = _gate_failures(p.gate) if p.gate else (None, [])
        facts["gate_verdict"] = verdict
        facts["bug_report"] = p.bug_report
        text = compose_summary(facts, p.history, failed_checks)
        title = _short(f"RMA: {facts.get('name') or 'GPU'} {facts.get('uuid') or gpu or '?'} on "
                       f"{ctx.target.node or 'unknown node'}", 150)
        structured: JsonObject = {
            **{k: v for k, v in facts.items() if k != "remediation_id"},
            "failed_checks": [line[2:] for line in failed_checks],
            "history_rows": len(p.history),
        }
        output: JsonObject = {"sent": False, "channel": p.channel, **structured, "title": title, "text": text}
        unknown = ", ".join(sorted(as_mapping(facts["unknown"])))
        suffix = f"; unknown: {unknown}" if unknown else ""
        if ctx.notifier is None:
            return ActionResult(changed=False, message="no notifier configured: RMA summary composed, not sent"
                                + suffix, output=output)
        fields = tuple(
            (label, str(value))
            for label, value in (
                ("Node", ctx.target.node),
                ("GPU", facts.get("uuid") or gpu),
                ("Serial", facts.get("serial") or "unknown"),
                ("Model", facts.get("name")),
            )
            if value
        )
        await ctx.notifier.send(
            Message(
                event="rma_report",
                title=title,
                text=text,
                tone="warning",
                fields=fields,
                remediation_id=ctx.remediation_id,
                channel=p.channel,
                data={"remediation_id": ctx.remediation_id, "step": ctx.step_name, "message": text,
                      "rma": structured},
            )
        )
        output["sent"] = True
        where = p.channel or "the configured channels"
        return ActionResult(changed=False, message=f"RMA summary queued for {where}{suffix}", output=output)

    @staticmethod
    async def _identity(
        ctx: ActionContext, gpu: str | None, facts: JsonObject
    ) -> tuple[GpuIdentity | None, str | None]:
        """The sidecar's answer, or None and why not (never raises: the summary goes out either way)."""
        if gpu is None:
            return None, "the remediation names no GPU (give gpu: <uuid> or <index>)"
        try:
            client = sidecar_client(ctx)
            ip = await node_internal_ip(ctx)
            facts["node_ip"] = ip
            return await client.identity(ip, gpu), None
        except ActionError as exc:
            return None, exc.message
        except ValidationError as exc:
            return None, f"the sidecar's answer is not a GPU identity: {exc.error_count()} errors"


def _identity_facts(identity: GpuIdentity | None, error: str | None, gpu: str | None) -> JsonObject:
    fields = ("uuid", "index", *(key for key, _ in _FIELDS), "retired_pages_pending")
    if identity is None:
        facts: JsonObject = dict.fromkeys(fields)
        facts["uuid"] = gpu if gpu and not gpu.isdigit() else None
        reason = "sidecar did not answer" if gpu else "no GPU named"
        facts["unknown"] = {key: reason for key in fields if key not in ("uuid", "index", "retired_pages_pending")}
        facts["identity_error"] = error
        return facts
    facts = json_object(identity.model_dump(mode="json", include=set(fields)))
    # Rows are remapped instead of pages retired on these GPUs: not a gap worth naming in the summary.
    unknown: JsonObject = {k: v for k, v in identity.unreadable.items()
               if not (k == "retired_pages_pending" and identity.remapped_rows is not None)}
    facts["unknown"] = unknown
    facts["identity_error"] = None
    return facts
