"""Action contexts wired to the fake apiserver, with a checkpoint store that survives a simulated crash."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from remediator.actions.base import ActionContext, Target
from remediator.adapters.kube import KubeAdapter
from remediator.settings import Settings
from tests.fakekube import FakeKube

NODE = "gpu-node-1"


@dataclass
class Checkpoints:
    """What the engine would persist: the last progress each step saved."""

    saved: list[dict[str, Any]] = field(default_factory=list)
    crash_after: int | None = None  # raise after this many checkpoints (the write is kept)

    async def __call__(self, progress: dict[str, Any]) -> None:
        self.saved.append(copy.deepcopy(progress))
        if self.crash_after is not None and len(self.saved) >= self.crash_after:
            raise RuntimeError("simulated controller crash")

    @property
    def last(self) -> dict[str, Any]:
        return copy.deepcopy(self.saved[-1]) if self.saved else {}


@pytest.fixture
def settings() -> Settings:
    return Settings(
        eviction_qps=1000.0,
        kube_qps=1000.0,
        excluded_namespaces=["kube-system", "gpu-operator"],
        own_namespace="remediator",
    )


@pytest.fixture
def node(fake_kube: FakeKube) -> dict[str, Any]:
    return fake_kube.add_node(NODE)


MakeCtx = Callable[..., ActionContext]


@pytest.fixture
def make_ctx(kube_adapter: KubeAdapter, settings: Settings) -> MakeCtx:
    def make(
        *,
        node: str = NODE,
        dry_run: bool = False,
        prior_output: Mapping[str, Any] | None = None,
        progress: dict[str, Any] | None = None,
        checkpoints: Checkpoints | None = None,
        context: Mapping[str, Any] | None = None,
        remediation_id: str = "rem-1",
        without_kube: bool = False,
    ) -> ActionContext:
        store = checkpoints if checkpoints is not None else Checkpoints()
        return ActionContext(
            remediation_id=remediation_id,
            step_name="step",
            target=Target(kind="node", node=node),
            settings=settings,
            dry_run=dry_run,
            kube=None if without_kube else kube_adapter,
            prior_output=prior_output,
            progress=dict(progress or {}),
            checkpoint=store,
            gathered=dict(context or {}),
        )

    return make
