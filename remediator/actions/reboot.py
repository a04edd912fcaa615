"""`await_reboot`: the proof that a node was rebooted before a reboot-only fault may leave quarantine.

An alert resolving says nothing about a reboot: dcgm-exporter restarting zeroes its Xid gauge, and a GPU
that fell off the bus can take its series with it. The kubelet reports a new `status.nodeInfo.bootID`
after every boot, so this gate step compares it with the boot ID recorded when the node was quarantined
(`context.node.boot_id`) and asks the engine to look again later (ResumeLater, with the reason) until the
ID has changed and the node is Ready. It never fails for waiting; it fails only when there is nothing to
compare with (no boot ID was recorded), because then a reboot cannot be proven.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from remediator.actions.base import Action, ActionContext, ActionResult, StrictParams, Target, planned
from remediator.actions.context import node_ready
from remediator.actions.node import require_kube, target_node
from remediator.domain.durations import DurationOrSeconds, parse_duration, within
from remediator.errors import ResumeLater, StepFailed
from remediator.kube.views import Node

__all__ = ["NOT_REBOOTED", "AwaitReboot", "AwaitRebootParams"]

# The start of the reason a gate waits with while the boot ID is unchanged (read by tests and the UI).
NOT_REBOOTED = "waiting for a reboot"


class AwaitRebootParams(StrictParams):
    # The boot ID recorded at quarantine, normally "{{ context.node.get('boot_id') }}" (None without a cluster).
    boot_id: str | None = Field(default=None, max_length=128)
    # How often to look again while waiting.
    poll: Annotated[DurationOrSeconds, within(1, 3600)] = "30s"
    # After the reboot the node must also report Ready.
    require_ready: bool = True


class AwaitReboot(Action[AwaitRebootParams]):
    """Wait until the node's boot ID differs from the one recorded at quarantine and the node is Ready."""

    name: ClassVar[str] = "await_reboot"
    Params = AwaitRebootParams
    mutating: ClassVar[bool] = False

    def describe(self, target: Target, params: AwaitRebootParams) -> str:
        p = params
        ready = " and report Ready" if p.require_ready else ""
        before = p.boot_id or "the one recorded at quarantine"
        return f"wait for node {target.node} to run a new boot (a boot ID other than {before}){ready}"

    async def plan(self, ctx: ActionContext, params: AwaitRebootParams) -> ActionResult:
        """The wait it would do; no boot ID (none is recorded without cluster access) is planned, not failed on."""
        return planned("would " + self.describe(ctx.target, params), {"boot_id_before": params.boot_id})

    async def apply(self, ctx: ActionContext, params: AwaitRebootParams) -> ActionResult:
        p = params
        name = target_node(ctx)
        if not p.boot_id:
            raise StepFailed(
                f"no boot ID was recorded when node {name} was quarantined, so a reboot cannot be proven; "
                "check the node and lift the quarantine by hand"
            )
        node = await require_kube(ctx).get_node(name)
        current = Node(node).boot_id
        poll = parse_duration(p.poll).total_seconds()
        if not current or current == p.boot_id:
            raise ResumeLater(poll, reason=(
                f"{NOT_REBOOTED}: node {name} still runs boot {p.boot_id}, the one it was quarantined in; "
                "a resolved alert alone does not return it to service"
            ))
        ready = node_ready(node)
        if p.require_ready and not ready:
            raise ResumeLater(poll, reason=f"node {name} rebooted (boot {p.boot_id} -> {current}); waiting for Ready")
        return ActionResult(
            changed=False,
            message=f"node {name} rebooted (boot {p.boot_id} -> {current})" + (" and is Ready" if ready else ""),
            output={"boot_id_before": p.boot_id, "boot_id_after": current, "ready": ready},
        )
