"""GPU actions: power limit and its restore, GPU reset, diagnostics, all through the node's sidecar.

Each action finds the node's InternalIP (from the gathered context, else from the Node object), the GPU
UUID (from the target, else resolved from the alert's index through the sidecar inventory), and calls
remediator.adapters.sidecar.SidecarClient. The sidecar keeps the original power limit on the node, so
`restore_power_limit` needs nothing from the forward step and survives a controller crash in between.
A limit someone else set after the cap is left as it is by the sidecar; the restore step then succeeds
without a change and says so in its output (`left_alone`, `reason`, `current_watts`, `capped_watts`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, ClassVar

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from remediator.actions.base import Action, ActionContext, ActionResult, NoParams, StrictParams
from remediator.actions.operands import operand_pods, restore_operands, take_operands_off, wait_for
from remediator.adapters.sidecar import SidecarClient
from remediator.domain.durations import DurationOrSeconds, parse_duration, within
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import ActionError, Conflict, Invalid, NotFound, NotSupported, StepFailed
from remediator.kube.views import Node
from remediator.sidecar.schemas import (
    DiagnosticsRequest,
    GpuInventory,
    GpuSnapshot,
    OneOfWattsOrPercent,
    ProcessOwner,
)

__all__ = [
    "CollectDiagnostics",
    "CollectDiagnosticsParams",
    "GpuReset",
    "GpuResetParams",
    "PowerLimit",
    "PowerLimitParams",
    "RestorePowerLimit",
    "node_internal_ip",
    "sidecar_client",
]


async def node_internal_ip(ctx: ActionContext) -> str:
    """The node's InternalIP: ctx.gathered["node"]["internal_ip"] if gathered, else from the Node object."""
    gathered = ctx.gathered.get("node")
    if isinstance(gathered, Mapping) and gathered.get("internal_ip"):
        return str(gathered["internal_ip"])
    name = ctx.target.node
    if not name:
        raise Invalid("the remediation target names no node, so its sidecar cannot be found")
    if ctx.kube is None:
        raise NotSupported(f"no Kubernetes access to look up the InternalIP of node {name}")
    for kind, address in Node(await ctx.kube.get_node(name)).addresses:
        if kind == "InternalIP" and address:
            return address
    raise StepFailed(f"node {name} reports no InternalIP address")


def sidecar_client(ctx: ActionContext) -> SidecarClient:
    if ctx.sidecar is None:
        raise NotSupported("no sidecar client configured (REMEDIATOR_SIDECAR_TOKEN / plan-only mode)")
    return ctx.sidecar


def _find(inventory: GpuInventory, uuid: str | None, index: str | None) -> GpuSnapshot:
    for gpu in inventory.gpus:
        if uuid is not None and gpu.uuid == uuid:
            return gpu
        if uuid is None and index is not None and str(gpu.index) == str(index):
            return gpu
    wanted = uuid or f"index {index}"
    raise NotFound(f"no GPU {wanted} in the sidecar inventory")


async def _locate(ctx: ActionContext) -> tuple[SidecarClient, str, GpuSnapshot]:
    """(client, node IP, inventory entry of the target GPU)."""
    client = sidecar_client(ctx)
    ip = await node_internal_ip(ctx)
    if ctx.target.gpu_uuid is None and ctx.target.gpu_index is None:
        raise Invalid("the remediation target names no GPU (neither UUID nor index)")
    inventory = await client.gpus(ip)
    return client, ip, _find(inventory, ctx.target.gpu_uuid, ctx.target.gpu_index)


def _answered(answer: BaseModel) -> JsonObject:
    """A sidecar answer as stored in a step's output or error details: the fields the sidecar sent."""
    document: JsonObject = answer.model_dump(mode="json", exclude_unset=True)
    return document


class PowerLimitParams(StrictParams, OneOfWattsOrPercent):
    """Exactly one of watts / percent_of_default; clamp into the GPU's range instead of failing."""

    watts: int | None = Field(default=None, gt=0)
    percent_of_default: float | None = Field(default=None, gt=0, le=200)
    clamp: bool = True
    # Only ever lower the limit: a GPU already at or below the target (an operator's lower cap, or a harder
    # cap already in force) is left as it is.
    only_lower: bool = False


class PowerLimit(Action[PowerLimitParams]):
    """Cap a GPU's power limit (the original is remembered on the node for restore_power_limit).

    A dry run asks the sidecar the same question with `dry_run`: it answers what it would set."""

    name: ClassVar[str] = "power_limit"
    Params = PowerLimitParams
    default_revert: ClassVar[str | None] = "restore_power_limit"

    async def plan(self, ctx: ActionContext, params: PowerLimitParams) -> ActionResult:
        return await self._cap(ctx, params, dry_run=True)

    async def apply(self, ctx: ActionContext, params: PowerLimitParams) -> ActionResult:
        return await self._cap(ctx, params, dry_run=False)

    async def _cap(self, ctx: ActionContext, params: PowerLimitParams, *, dry_run: bool) -> ActionResult:
        client, ip, gpu = await _locate(ctx)
        uuid = str(gpu.uuid)
        low, high = gpu.power_limit_min_watts, gpu.power_limit_max_watts
        if params.watts is not None:
            requested = float(params.watts)
        else:
            default = gpu.power_limit_default_watts
            if default is None:
                raise NotSupported(f"{uuid} reports no default power limit")
            requested = round(float(default) * float(params.percent_of_default or 0) / 100.0, 3)
        target = requested
        if low is not None and high is not None and not float(low) <= requested <= float(high):
            if not params.clamp:
                raise Invalid(
                    f"power limit {requested:g} W is outside the allowed range {low:g}-{high:g} W for {uuid}"
                )
            target = min(max(requested, float(low)), float(high))
        current = gpu.power_limit_watts
        if params.only_lower and current is not None and float(current) <= target:
            return ActionResult(
                changed=False,
                message=f"{uuid} is already limited to {float(current):g} W, at or below {target:g} W: left as it is",
                output={"node_ip": ip, "gpu_uuid": uuid, "requested_watts": requested, "clamped": target != requested,
                        "previous_watts": current, "new_watts": current, "left_alone": True, "dry_run": dry_run},
            )
        answer = await client.set_power_limit(ip, uuid, watts=target, dry_run=dry_run)
        output: JsonObject = {
            "node_ip": ip,
            "gpu_uuid": uuid,
            "requested_watts": requested,
            "clamped": target != requested,
            "previous_watts": answer.previous_watts,
            "new_watts": answer.new_watts,
            "original_watts": answer.original_watts,
            "dry_run": dry_run,
        }
        return ActionResult(changed=answer.changed and not dry_run, message=answer.message, output=output)


class RestorePowerLimit(Action[NoParams]):
    """Put back the power limit in force before the first power_limit step; one set by someone else since stays.

    The sidecar leaves such a limit alone; the step succeeds without a change and reports it.
    """

    name: ClassVar[str] = "restore_power_limit"
    Params = NoParams

    async def plan(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        return await self._restore(ctx, dry_run=True)

    async def apply(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        return await self._restore(ctx, dry_run=False)

    async def _restore(self, ctx: ActionContext, *, dry_run: bool) -> ActionResult:
        client, ip, gpu = await _locate(ctx)
        uuid = str(gpu.uuid)
        answer = await client.restore_power_limit(ip, uuid, dry_run=dry_run)
        output: JsonObject = {
            "node_ip": ip,
            "gpu_uuid": uuid,
            "previous_watts": answer.previous_watts,
            "new_watts": answer.new_watts,
            "dry_run": dry_run,
        }
        if answer.left_alone:
            output.update(
                left_alone=True,
                reason=answer.reason,
                current_watts=answer.current_watts,
                capped_watts=answer.capped_watts,
                original_watts=answer.original_watts,
            )
        return ActionResult(changed=answer.changed and not dry_run, message=answer.message, output=output)


_PROCESSES = TypeAdapter(list[ProcessOwner])


def _processes_in(details: Mapping[str, object]) -> list[ProcessOwner]:
    """The processes a 409 from the sidecar lists (none when its body says otherwise)."""
    try:
        return _PROCESSES.validate_python(details.get("processes") or [])
    except ValidationError:
        return []


def _describe_processes(processes: Sequence[ProcessOwner]) -> str:
    shown = []
    for p in processes[:10]:
        owner = f" in pod {p.pod_uid}" if p.pod_uid else ""
        shown.append(f"pid {p.pid}{owner}")
    more = f" and {len(processes) - 10} more" if len(processes) > 10 else ""
    return ", ".join(shown) + more


def describe_holder(holder: Mapping[str, object]) -> str:
    """One holder of a refused reset as the node agent names it (remediator/sidecar/holders.py)."""
    if holder.get("kind") == "persistence-mode":
        return "persistence mode on"
    kind = holder.get("kind")
    shown = f" ({kind})" if kind and kind != "process" else ""
    where = f" in pod {holder['pod_uid']}" if holder.get("pod_uid") else ""
    return f"pid {holder.get('pid')} {holder.get('program')}{shown}{where}"


class GpuResetParams(StrictParams):
    """`operands`: the GPU Operator operands (labels nvidia.com/gpu.deploy.<operand>) taken off the node for
    the reset and brought back after it (remediator/actions/operands.py); `persistence_off`: ask the node
    agent to turn persistence mode off for the reset and on again after it."""

    operands: list[Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]] = Field(
        default_factory=list, max_length=16
    )
    off_value: Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", max_length=63)] = "false"
    operand_timeout: Annotated[DurationOrSeconds, within(1, 3600)] = "5m"
    persistence_off: bool = False


class GpuReset(Action[GpuResetParams]):
    """Reset a GPU; refuses while pods hold it or processes run on it.

    With `operands`, the GPU Operator's operands leave the node for the reset and come back after it (the
    previous label values checkpointed first; restored on failure too, and on resume after a crash, when
    the reset is not repeated: whether it ran is unknown, so the step fails for a person to judge). A reset
    the node agent never received (the connection refused, or the agent unreachable before the request) is
    not such a crash: the step run again once the agent answers takes the operands off and resets.
    A dry run looks at the GPU's pods the same way, says it would refuse where a reset would, and asks
    the sidecar the reset question with `dry_run`."""

    name: ClassVar[str] = "gpu_reset"
    Params = GpuResetParams

    async def plan(self, ctx: ActionContext, params: GpuResetParams) -> ActionResult:
        return await self._reset(ctx, params, dry_run=True)

    async def apply(self, ctx: ActionContext, params: GpuResetParams) -> ActionResult:
        if not params.operands:
            return await self._reset(ctx, params, dry_run=False)
        if ctx.kube is None or not ctx.target.node:
            raise NotSupported("taking GPU Operator operands off a node needs Kubernetes access and a node")
        kube, node = ctx.kube, ctx.target.node
        timeout = parse_duration(params.operand_timeout).total_seconds()
        progress = ctx.progress
        interrupted = progress.get("operands_phase") == "resetting"
        failure: BaseException | None = None
        result: ActionResult | None = None

        async def resetting() -> None:
            # Recorded just before the reset request goes out: from here whether the GPU was reset is unknown.
            progress["operands_phase"] = "resetting"
            await ctx.checkpoint(dict(progress))

        try:
            if not interrupted:
                recorded = await take_operands_off(kube, node, params.operands, params.off_value, progress,
                                                   ctx.checkpoint)
                await wait_for(kube, node, lambda pods: not any(operand_pods(pods, label) for label in recorded),
                               timeout=timeout, what=f"the pods of {', '.join(recorded) or 'no operand'} to go")
                result = await self._reset(ctx, params, dry_run=False, before_reset=resetting)
        except BaseException as exc:  # the operands come back whatever happened to the reset
            failure = exc
        restored = await restore_operands(kube, node, progress, ctx.checkpoint, timeout=timeout)
        if failure is not None:
            if progress.get("operands_phase") == "resetting" and _never_delivered(failure):
                # The node agent never got the reset (connection refused): the GPU was not reset, so the step
                # run again once the agent answers (a transient failure waits, engine/executor.py) resets it.
                progress["operands_phase"] = "restored"
                await ctx.checkpoint(dict(progress))
            raise failure
        if result is None:
            raise StepFailed(
                f"the controller stopped during the reset of {ctx.target.gpu_uuid or ctx.target.gpu_index}: the "
                f"operands are back ({', '.join(restored) or 'none changed'}); whether the GPU was reset is "
                "unknown, so it is not reset again", details={"operands": restored},
            )
        result.output["operands"] = restored
        return result

    async def _reset(
        self, ctx: ActionContext, params: GpuResetParams, *, dry_run: bool,
        before_reset: Callable[[], Awaitable[None]] | None = None,
    ) -> ActionResult:
        """`before_reset` is awaited right before the reset request is sent (not for a refusal or a dry run)."""
        client, ip, gpu = await _locate(ctx)
        uuid = str(gpu.uuid)
        pods = await client.gpu_pods(ip, uuid)
        holders = [f"{p.namespace}/{p.name}" for p in pods.pods]
        output: JsonObject = {"node_ip": ip, "gpu_uuid": uuid, "dry_run": dry_run, "pods": list[JsonValue](holders)}
        if holders:
            reason = f"pods still hold {uuid}: {', '.join(holders)}"
            if pods.processes:
                reason += f"; processes: {_describe_processes(pods.processes)}"
            if dry_run:
                return ActionResult(changed=False, message=f"would refuse: {reason}", output=output)
            raise StepFailed(reason, details=_answered(pods))
        if before_reset is not None and not dry_run:
            await before_reset()
        try:
            answer = await client.reset(ip, uuid, dry_run=dry_run, persistence_off=params.persistence_off)
        except Conflict as exc:
            details = exc.details if isinstance(exc.details, Mapping) else {}
            named = _describe_processes(_processes_in(details))
            holders = [describe_holder(h) for h in details.get("holders") or [] if isinstance(h, Mapping)]
            named = "; ".join(n for n in (named, *holders) if n)
            raise StepFailed(f"{uuid} is still in use: {named}", status=409, details=details) from exc
        post_check = None if answer.post_check is None else _answered(answer.post_check)
        output.update(post_check=post_check, method=answer.method)
        if not dry_run and not answer.healthy:
            raise StepFailed(f"{uuid} was reset but is not healthy: {answer.message}", details=_answered(answer))
        return ActionResult(changed=answer.changed and not dry_run, message=answer.message, output=output)


def _never_delivered(exc: BaseException) -> bool:
    """The node agent client's word that a request never reached the agent (a refused connection)."""
    details = getattr(exc, "details", None)
    return isinstance(exc, ActionError) and isinstance(details, Mapping) and details.get("sent") is False


class CollectDiagnosticsParams(StrictParams):
    """`bug_report: true` also has the node run nvidia-bug-report.sh (bounded by `timeout`)."""

    bug_report: bool = False
    timeout: Annotated[DurationOrSeconds, within(0, 3600)] = "10m"
    safe_mode: bool = True


class CollectDiagnostics(Action[CollectDiagnosticsParams]):
    """Snapshot the GPU (inventory, driver, pods, processes) into the step output, and the bug report if asked.

    With `bug_report: true` the node also runs nvidia-bug-report.sh, keeps the report and the output
    references it (path, size, SHA-256).

    A node target without a GPU gets the whole inventory. A node without nvidia-bug-report.sh is not a
    failure: the output says the report is not available.
    """

    name: ClassVar[str] = "collect_diagnostics"
    Params = CollectDiagnosticsParams
    mutating: ClassVar[bool] = False

    async def plan(self, ctx: ActionContext, params: CollectDiagnosticsParams) -> ActionResult:
        """A dry run snapshots the GPU as well (it only reads) but leaves the bug report (the node writes it)."""
        return await self._collect(ctx, params, bug_report=False)

    async def apply(self, ctx: ActionContext, params: CollectDiagnosticsParams) -> ActionResult:
        return await self._collect(ctx, params, bug_report=True)

    async def _collect(self, ctx: ActionContext, params: CollectDiagnosticsParams, *, bug_report: bool) -> ActionResult:
        client = sidecar_client(ctx)
        ip = await node_internal_ip(ctx)
        inventory = await client.gpus(ip)
        output: JsonObject = {
            "node_ip": ip,
            "driver_version": inventory.driver_version,
            "nvml_version": inventory.nvml_version,
        }
        if ctx.target.gpu_uuid is None and ctx.target.gpu_index is None:
            output["gpus"] = list[JsonValue]([_answered(gpu) for gpu in inventory.gpus])
            message = f"collected diagnostics of node {ctx.target.node}"
        else:
            gpu = _find(inventory, ctx.target.gpu_uuid, ctx.target.gpu_index)
            output["gpu"] = _answered(gpu)
            try:
                output["pods"] = _answered(await client.gpu_pods(ip, str(gpu.uuid)))
            except ActionError as exc:
                output["pods_error"] = exc.message
            message = f"collected diagnostics of {gpu.uuid}"
        if params.bug_report:
            if not bug_report:
                output["bug_report"] = {"dry_run": True}
                message += "; would collect nvidia-bug-report.sh output on the node"
            else:
                request = DiagnosticsRequest(
                    timeout_seconds=parse_duration(params.timeout).total_seconds(), safe_mode=params.safe_mode
                )
                report = await client.collect_diagnostics(ip, request)
                output["bug_report"] = report.model_dump(mode="json")
                if report.path:
                    message += f"; bug report {report.path} ({report.size_bytes} bytes)"
                    message += " truncated" if report.truncated else ""
                else:
                    message += f"; no bug report: {report.detail}"
        return ActionResult(changed=False, message=message, output=output)
