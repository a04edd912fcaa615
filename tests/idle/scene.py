"""The idle-GPU scene shared by the pipeline and acceptance tests: a namespace with an owner, an idle
Deployment holding GPUs, a GPU ResourceQuota, and rules that start the shipped playbook with a short wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from remediator.definitions.loader import BUNDLED_PLAYBOOKS
from tests.fakekube.server import FakeKube
from tests.idle.conftest import idle_deployment

NS = "research"
OWNER = "#ml-research"
QUOTA = {"requests.nvidia.com/gpu": "8", "limits.nvidia.com/gpu": "8", "requests.cpu": "64"}


def build_scene(fake: FakeKube) -> list[str]:
    """Deployment notebook (2 replicas x 2 GPUs) in `research`, owned by #ml-research, quota 8 GPUs."""
    pods = idle_deployment(fake, NS, "notebook", replicas=2, gpus=2)
    fake.write("namespaces", None, NS, {"metadata": {"annotations": {"remediator.io/owner": OWNER}}})
    fake.add_resource_quota("gpus", NS, QUOTA)
    fake.write(
        "resourcequotas",
        NS,
        "gpus",
        {"status": {"used": {"requests.nvidia.com/gpu": "4", "limits.nvidia.com/gpu": "4"}}},
    )
    return pods


def definitions(tmp_path: Path, *, wait: str, poll: str, on_resolved: str = "keep") -> tuple[Path, Path]:
    """A rules dir starting the shipped reclaim-idle-gpu playbook (with `on_resolved` as given)."""
    rules, playbooks = tmp_path / "rules", tmp_path / "playbooks"
    rules.mkdir()
    playbooks.mkdir()
    rule = {
        "name": "gpu-idle",
        "match": ['alertname="GPUIdle"'],
        "playbook": "reclaim-idle-gpu",
        "kind": "idle",
        "params": {"wait": wait, "poll": poll, "usage_wait": "0s"},
    }
    (rules / "gpu-idle.yaml").write_text(yaml.safe_dump({"rules": [rule]}))
    shipped = yaml.safe_load((BUNDLED_PLAYBOOKS / "reclaim-idle-gpu.yaml").read_text())
    shipped["on_resolved"] = on_resolved
    (playbooks / "reclaim-idle-gpu.yaml").write_text(yaml.safe_dump(shipped))
    return rules, playbooks


def replicas(fake: FakeKube) -> int:
    deployment = fake.get("deployments", NS, "notebook")
    assert deployment is not None
    return int(deployment["spec"]["replicas"])


def quota_hard(fake: FakeKube) -> dict[str, Any]:
    quota = fake.get("resourcequotas", NS, "gpus")
    assert quota is not None
    return dict(quota["spec"]["hard"])


async def eventually(
    check: Callable[[], Awaitable[bool]], step: Callable[[], Awaitable[None]], limit: float = 30
) -> None:
    """Run `step` (e.g. the worker) until `check` holds."""
    async with asyncio.timeout(limit):
        while not await check():
            await step()
            await asyncio.sleep(0.02)
