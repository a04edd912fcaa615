"""The objects a running controller shares: settings, store, definitions, actions, adapters, metrics.

Built once by the app factory (or a test) and passed explicitly to the worker, executor and routes.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from remediator.actions.base import Action
from remediator.definitions import DefinitionSet
from remediator.observability import Metrics
from remediator.settings import Settings
from remediator.store.repository import Repository

if TYPE_CHECKING:
    from remediator.adapters.kube import KubeAdapter
    from remediator.adapters.sidecar import SidecarClient
    from remediator.engine.notifications import NotificationService

__all__ = ["DefinitionsHolder", "Runtime", "replica_id"]


def replica_id(settings: Settings) -> str:
    """Stable-enough identity of this process for leases and audit (pod name in Kubernetes)."""
    if settings.replica_id:
        return settings.replica_id
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class DefinitionsHolder:
    """The definition set in force; swapped whole on reload so readers never see half a set."""

    def __init__(self, current: DefinitionSet) -> None:
        self.current = current
        self.history: dict[str, DefinitionSet] = {current.version: current}
        self.last_error: str | None = None

    def replace(self, new: DefinitionSet) -> None:
        self.current = new
        self.history[new.version] = new
        self.last_error = None


@dataclass
class Runtime:
    settings: Settings
    repo: Repository
    definitions: DefinitionsHolder
    actions: Mapping[str, Action]
    metrics: Metrics
    owner: str
    kube: KubeAdapter | None = None
    sidecar: SidecarClient | None = None
    notifier: NotificationService | None = None
    gpu_nodes: int = 0
    nodes_by_ip: dict[str, str] = field(default_factory=dict)

    @property
    def plan_only(self) -> bool:
        """No cluster credentials, or DRY_RUN asked for: actions only describe what they would do."""
        if self.settings.dry_run is not None:
            return self.settings.dry_run or self.kube is None
        return self.kube is None
