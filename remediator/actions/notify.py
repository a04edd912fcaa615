"""The `notify` action: a playbook step that tells people something (Slack and/or the JSON webhook).

The message is a template the engine has already rendered; `channel` optionally names a Slack channel
(honoured by webhooks that may post to several channels; others use their own). Delivery is queued and
retried by the notification service, and a delivery failure is recorded there, so this step never fails
a remediation and changes nothing in the cluster.
"""

from __future__ import annotations

from pydantic import Field

from remediator.actions.base import Action, ActionContext, ActionResult, StrictParams, Target
from remediator.adapters.notifier import Message

__all__ = ["Notify", "NotifyParams"]


class NotifyParams(StrictParams):
    message: str = Field(min_length=1, max_length=3000)
    channel: str | None = Field(default=None, max_length=80)


class Notify(Action[NotifyParams]):
    """Send a rendered message to the configured notification channels."""

    name = "notify"
    Params = NotifyParams
    mutating = False

    async def plan(self, ctx: ActionContext, params: NotifyParams) -> ActionResult:
        """A dry run sends the message too: it changes nothing in the cluster."""
        return await self.apply(ctx, params)

    async def apply(self, ctx: ActionContext, params: NotifyParams) -> ActionResult:
        where = params.channel or "the configured channels"
        if ctx.notifier is None:
            return ActionResult(changed=False, message="no notifier configured", output={"sent": False})
        alert = str(ctx.alert.get("name") or "alert")
        fields = tuple(
            (k, v)
            for k, v in (
                ("Alert", alert),
                ("Node", ctx.target.node),
                ("GPU", ctx.target.gpu_uuid or ctx.target.gpu_index),
            )
            if v
        )
        await ctx.notifier.send(
            Message(
                event="message",
                title=f"{alert} on {ctx.target.key}"[:150],
                text=params.message,
                fields=fields,
                remediation_id=ctx.remediation_id,
                channel=params.channel,
                data={"remediation_id": ctx.remediation_id, "step": ctx.step_name, "message": params.message},
            )
        )
        return ActionResult(
            changed=False, message=f"queued for {where}", output={"sent": True, "channel": params.channel}
        )

    def describe(self, target: Target, params: NotifyParams) -> str:
        text = params.message if len(params.message) <= 80 else params.message[:79] + "…"
        return f"notify {params.channel or 'the configured channels'}: {text}"
