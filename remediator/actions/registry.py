"""The table of actions playbooks can name: one instance per action, keyed by its name."""

from __future__ import annotations

from remediator.actions.base import AnyAction
from remediator.actions.conditions import ClearNodeCondition, SetNodeCondition
from remediator.actions.drain import Drain
from remediator.actions.gpu import CollectDiagnostics, GpuReset, PowerLimit, RestorePowerLimit
from remediator.actions.kube_event import RecordKubeEvent
from remediator.actions.node import Annotate, Cordon, Label, Taint, Unannotate, Uncordon, Unlabel, Untaint
from remediator.actions.notify import Notify
from remediator.actions.owner import AnnotatePods, NotifyOwner, UnannotatePods
from remediator.actions.quota import ReclaimQuota, RestoreQuota
from remediator.actions.reboot import AwaitReboot
from remediator.actions.rma import RmaReport
from remediator.actions.validation import ValidateGpu
from remediator.actions.wait import Wait
from remediator.actions.workload import RestoreWorkload, ScaleWorkload

__all__ = ["default_registry"]


def default_registry() -> dict[str, AnyAction]:
    actions: list[AnyAction] = [
        Cordon(),
        Uncordon(),
        Taint(),
        Untaint(),
        Label(),
        Unlabel(),
        Annotate(),
        Unannotate(),
        Drain(),
        RecordKubeEvent(),
        PowerLimit(),
        RestorePowerLimit(),
        GpuReset(),
        CollectDiagnostics(),
        Notify(),
        ReclaimQuota(),
        RestoreQuota(),
        ScaleWorkload(),
        RestoreWorkload(),
        AnnotatePods(),
        UnannotatePods(),
        NotifyOwner(),
        Wait(),
        ValidateGpu(),
        RmaReport(),
        SetNodeCondition(),
        ClearNodeCondition(),
        AwaitReboot(),
    ]
    return {action.name: action for action in actions}
