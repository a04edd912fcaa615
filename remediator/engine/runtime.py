"""The objects a running controller shares: settings, store, definitions, actions, adapters, metrics.

Built once by the app factory (or a test) and passed explicitly to the worker, executor and routes.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from remediator.actions.base import AnyAction
from remediator.definitions import DefinitionSet
from remediator.domain.timestamps import Clock
from remediator.errors import DefinitionError
from remediator.kube.inventory import NodeInventory
from remediator.process.metrics import Metrics
from remediator.settings import Settings
from remediator.store.intake_writer import IntakeWriter
from remediator.store.repository import Repository

if TYPE_CHECKING:
    from remediator.adapters.kube import KubeAdapter
    from remediator.adapters.sidecar import SidecarClient
    from remediator.engine.notifications import NotificationService

__all__ = ["DefinitionsHolder", "ReloadOutcome", "Runtime", "replica_id"]


def replica_id(settings: Settings) -> str:
    """Stable-enough identity of this process for leases and audit (pod name in Kubernetes)."""
    if settings.replica_id:
        return settings.replica_id
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class ReloadOutcome:
    """One attempt to load the definitions: what started it, whether the new set was taken, and why not."""

    ok: bool
    at: datetime
    trigger: str
    version: str
    changed: bool = False
    errors: tuple[DefinitionError, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "at": self.at.isoformat(),
            "trigger": self.trigger,
            "version": self.version,
            "changed": self.changed,
            "errors": [
                {"file": e.file, "line": e.line, "message": e.message, "path": e.path, "text": e.render()}
                for e in self.errors
            ],
        }


class DefinitionsHolder:
    """The definition set in force; swapped whole on reload so readers never see half a set.

    Earlier sets stay readable by version (`get`) for the API, up to `keep` of them; the set in force is
    never dropped. A refused set changes nothing but `last_reload`, which carries its errors (file:line).
    """

    def __init__(self, current: DefinitionSet, *, keep: int = 20) -> None:
        self.current = current
        self.keep = max(1, keep)
        self.history: dict[str, DefinitionSet] = {current.version: current}
        self.loaded_at: dict[str, datetime] = {current.version: datetime.now(UTC)}
        self.last_reload: ReloadOutcome | None = None
        # Versions whose sources are known to be stored in the database.
        self.persisted: set[str] = set()

    def get(self, version: str) -> DefinitionSet | None:
        return self.history.get(version)

    def replace(self, new: DefinitionSet, *, trigger: str = "manual") -> ReloadOutcome:
        """Put a checked set in force (a set equal to the current one changes nothing but the record)."""
        now = datetime.now(UTC)
        changed = new.version != self.current.version
        if changed:
            self.current = new
            self.history.pop(new.version, None)
            self.history[new.version] = new
            self.loaded_at[new.version] = now
            while len(self.history) > self.keep:
                oldest = next(v for v in self.history if v != self.current.version)
                del self.history[oldest]
                self.loaded_at.pop(oldest, None)
        self.last_reload = ReloadOutcome(True, now, trigger, self.current.version, changed)
        return self.last_reload

    def refuse(self, errors: Sequence[DefinitionError], *, trigger: str = "manual") -> ReloadOutcome:
        """Record a set that failed validation; the current set stays in force."""
        self.last_reload = ReloadOutcome(
            False, datetime.now(UTC), trigger, self.current.version, False, tuple(errors)
        )
        return self.last_reload


@dataclass
class Runtime:
    settings: Settings
    repo: Repository
    definitions: DefinitionsHolder
    actions: Mapping[str, AnyAction]
    metrics: Metrics
    owner: str
    kube: KubeAdapter | None = None
    sidecar: SidecarClient | None = None
    notifier: NotificationService | None = None
    gpu_nodes: int = 0
    nodes_by_ip: dict[str, str] = field(default_factory=dict)
    # Every node as the list and watch see it (None without cluster access or before the first list).
    inventory: NodeInventory | None = None
    # Set by the worker when its last claim filled every free slot (more runnable remediations may wait):
    # a running remediation then gives its slot back between steps, so a storm's new remediations are
    # admitted and quarantine their nodes before long steps (drains) of earlier ones go on.
    crowded: bool = False
    intake: IntakeWriter = field(init=False)

    def __post_init__(self) -> None:
        self.intake = IntakeWriter(self.repo)

    @property
    def clock(self) -> Clock:
        """The controller's one clock (the store's: tests set it there), aware UTC (domain/timestamps.py)."""
        return self.repo.clock

    @property
    def plan_only(self) -> bool:
        """No cluster credentials, or DRY_RUN asked for: actions only describe what they would do."""
        if self.settings.dry_run is not None:
            return self.settings.dry_run or self.kube is None
        return self.kube is None
