"""`validate_gpu`: the return-to-service gate, run by the node's sidecar on one GPU or every GPU of the node.

Playbooks that lift their own quarantine run it before untainting and uncordoning. The gate has three
verdicts:

- passed: every GPU passed every check;
- failed: a GPU that could be read failed a named check (a `fail` verdict): the step FAILS, naming the
  failing checks in its error, the node stays quarantined and the escalation ladder may climb;
- unknown: no verdict could be reached: the node agent was unreachable, answered an error (5xx, or a 4xx
  such as a wrong token) or nothing readable, did not answer in time, or a GPU's checks could only err
  (NVML unreadable, driver not loaded, DCGM not runnable now). The action raises `GateUnknown`: the engine
  keeps the node quarantined, looks again with backoff, pages a person once and never escalates. An
  unreachable agent says nothing about a GPU; sending it to replacement would send every node of a
  DaemonSet rollout there.

The full per-GPU reports (every check with its value and threshold, and each DCGM test) are the step's
output whether it passes or fails.

`gpu` picks what to validate: unset, the remediation's GPU (UUID, else index); a UUID or an index; `all`,
every GPU in the sidecar's inventory plus the remediation's GPU and `expected_gpus` when they are missing
from it (a GPU that did not come back after a reset or reboot fails `present`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from typing import Annotated, ClassVar, TypeVar

from pydantic import Field, ValidationError, field_validator

from remediator.actions.base import Action, ActionContext, ActionResult, StrictParams, Target, planned
from remediator.actions.gpu import node_internal_ip, sidecar_client
from remediator.domain.durations import DurationOrSeconds, parse_duration, within
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import ActionError, GateUnknown, Invalid, ServiceUnavailable, StepFailed
from remediator.sidecar.schemas import ValidateRequest, ValidationReport

__all__ = ["ValidateGpu", "ValidateGpuParams", "failure_summary", "readable_failure"]

T = TypeVar("T")

_GPU = re.compile(r"^(all|\d{1,4}|GPU-[0-9a-fA-F-]{8,64})$")
_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{8,64}$")


class ValidateGpuParams(StrictParams):
    gpu: str | None = None
    dcgm_level: int = Field(default=1, ge=1, le=4)
    require_dcgm: bool = False
    # How long one GPU's DCGM diagnostic may run before the sidecar kills it (level 2: minutes).
    timeout: Annotated[DurationOrSeconds, within(0, 4 * 3600)] = "15m"
    aggregate_uncorrectable_baseline: int | None = Field(default=None, ge=0)
    temperature_margin_c: int = Field(default=10, ge=0, le=60)
    expected_gpus: list[str] = Field(default_factory=list)

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, value: str | None) -> str | None:
        if value is not None and not _GPU.fullmatch(value):
            raise ValueError(f"gpu must be a GPU UUID, an index or 'all', got {value[:80]!r}")
        return value

    @field_validator("expected_gpus")
    @classmethod
    def _expected(cls, value: list[str]) -> list[str]:
        for uuid in value:
            if not _UUID.fullmatch(uuid):
                raise ValueError(f"expected_gpus takes GPU UUIDs, got {uuid[:80]!r}")
        return value


def readable_failure(report: ValidationReport) -> bool:
    """Did a check of this GPU read a value and find it out of bounds? Checks that only erred (the value
    could not be read) prove nothing either way: such a report is unknown, not failed."""
    return any(c.verdict == "fail" for c in report.checks)


def failure_summary(reports: list[ValidationReport]) -> str:
    """`GPU-x: remapped_rows.pending (a row remap is pending ...), dcgm.memory (...)` per failed GPU."""
    parts = []
    for report in reports:
        if report.verdict == "pass":
            continue
        by_name = {c.name: c for c in report.checks}
        named = []
        for name in report.failed:
            detail = by_name[name].detail if name in by_name else ""
            detail = detail if len(detail) <= 160 else detail[:159] + "…"
            named.append(f"{name} ({detail})" if detail else name)
        parts.append(f"{report.uuid or report.gpu}: {', '.join(named)}")
    return "; ".join(parts)


def _target_gpu(ctx: ActionContext) -> str | None:
    return ctx.target.gpu_uuid or ctx.target.gpu_index


async def _gpus(ctx: ActionContext, params: ValidateGpuParams, ip: str) -> list[str]:
    if params.gpu is not None and params.gpu != "all":
        return [params.gpu]
    if params.gpu is None:
        gpu = _target_gpu(ctx)
        if gpu is None:
            raise Invalid("validate_gpu: the remediation names no GPU; give gpu: <uuid>, <index> or all")
        return [gpu]
    client = sidecar_client(ctx)
    inventory = await _ask(client.address(ip), client.gpus(ip))
    wanted: list[str] = []
    for entry in inventory.gpus:
        wanted.append(str(entry.uuid or entry.index))
    for uuid in [ctx.target.gpu_uuid, *params.expected_gpus]:
        if uuid and uuid not in wanted:
            wanted.append(uuid)
    if not wanted:
        raise GateUnknown(client.address(ip), "reports no GPU at all",
                          "the node agent's inventory lists no GPU, so nothing could be validated")
    return wanted


def _symptom(exc: BaseException) -> str:
    """How the agent failed, in a few words: `unreachable`, `answering 503`, `timed out`."""
    status = getattr(exc, "status", None)
    if status:
        return f"answering {status}"
    if isinstance(exc, ServiceUnavailable):
        details = exc.details if isinstance(exc.details, dict) else {}
        if details.get("sent") is False:
            return "unreachable"
        return "timed out" if "Timeout" in exc.message else "failed mid-request"
    if isinstance(exc, ValidationError):
        return "answering something that is not a validation report"
    return "timed out"


async def _ask(agent: str, call: Awaitable[T]) -> T:
    """A call to the node agent; any way it fails to answer is an unknown gate, never a failed GPU. A refusal
    made here before anything was sent (a malformed GPU id) stays an error of the playbook."""
    try:
        return await call
    except ActionError as exc:
        if exc.status is None and not isinstance(exc, ServiceUnavailable):
            raise
        raise GateUnknown(agent, _symptom(exc), exc.message) from exc
    except ValidationError as exc:
        raise GateUnknown(agent, _symptom(exc), f"an answer that does not fit its model: {exc}"[:500]) from exc


class ValidateGpu(Action[ValidateGpuParams]):
    """Prove a GPU (or every GPU of the node) healthy; fail the step, naming the checks, when it is not."""

    name: ClassVar[str] = "validate_gpu"
    Params = ValidateGpuParams
    mutating: ClassVar[bool] = False
    gate: ClassVar[bool] = True

    def describe(self, target: Target, params: ValidateGpuParams) -> str:
        p = params
        which = p.gpu or "the remediation's GPU"
        dcgm = f"DCGM level {p.dcgm_level}" + (" (required)" if p.require_dcgm else " where installed")
        return f"validate_gpu({which}: NVML checks and {dcgm}) on {target.key}"

    async def plan(self, ctx: ActionContext, params: ValidateGpuParams) -> ActionResult:
        return planned("would " + self.describe(ctx.target, params), {"gpu": params.gpu or _target_gpu(ctx)})

    async def apply(self, ctx: ActionContext, params: ValidateGpuParams) -> ActionResult:
        p = params
        client = sidecar_client(ctx)
        ip = await node_internal_ip(ctx)
        request = ValidateRequest(
            dcgm_level=p.dcgm_level,
            require_dcgm=p.require_dcgm,
            dcgm_timeout_seconds=parse_duration(p.timeout).total_seconds(),
            aggregate_uncorrectable_baseline=p.aggregate_uncorrectable_baseline,
            temperature_margin_c=p.temperature_margin_c,
        )
        agent = client.address(ip)
        # The answer must come before the step's own deadline ends it as a failure: a gate that runs out of
        # time has no verdict (unknown), it did not find a broken GPU.
        budget = max(1.0, ctx.timeout - min(60.0, ctx.timeout / 10))
        try:
            async with asyncio.timeout(budget):
                reports = [await _ask(agent, client.validate(ip, gpu, request)) for gpu in await _gpus(ctx, p, ip)]
        except TimeoutError:
            raise GateUnknown(agent, "timed out", f"no verdict within {budget:g}s") from None
        failed = [r for r in reports if r.verdict != "pass"]
        readable = [r for r in failed if readable_failure(r)]
        output: JsonObject = {
            "node_ip": ip,
            "verdict": "fail" if readable else "unknown" if failed else "pass",
            "failed": {r.uuid or r.gpu: list[JsonValue](r.failed) for r in failed},
            "dcgm_level": p.dcgm_level,
            "require_dcgm": p.require_dcgm,
            "gpus": [r.model_dump(mode="json") for r in reports],
        }
        if readable:
            raise StepFailed(f"GPU validation failed: {failure_summary(reports)}", output=output)
        if failed:
            raise GateUnknown(agent, "unable to read the GPUs", f"could not read {failure_summary(failed)}",
                              output=output)
        names = ", ".join(r.uuid or r.gpu for r in reports)
        warnings = [f"{r.uuid}: {c.name}: {c.warning}" for r in reports for c in r.checks if c.warning]
        message = f"{names} passed validation ({sum(len(r.checks) for r in reports)} checks)"
        if warnings:
            output["warnings"] = list[JsonValue](warnings)
            message += f"; {len(warnings)} warning(s)"
        return ActionResult(changed=False, message=message, output=output)
