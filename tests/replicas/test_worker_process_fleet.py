"""The fleet page in worker-process mode: the worker process keeps the node inventory (list and watch) and sends
its facts to the web process over their link (engine/worker_process.py `_send_inventory`), which has no
inventory of its own. Through `remediator serve` with REMEDIATOR_WORKER_PROCESS=true against the strict fake
API server: /api/v1/fleet shows every GPU node with its GPUs and quarantine marks, counts the breaker against
them, and follows a quarantine taint put on or taken off by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.kube.vocabulary import QUARANTINE_TAINT
from tests.controller_process import ControllerProcess
from tests.fakekube.server import FakeKube
from tests.replicas.test_guard import TOKEN, wait_until
from tests.replicas.test_worker_process import WORKER, cluster_env, worker_pid

pytestmark = pytest.mark.timeout(240)
MARK = {"key": QUARANTINE_TAINT, "value": "by-hand", "effect": "NoSchedule"}


async def fleet(client: httpx.AsyncClient, ctl: ControllerProcess) -> dict[str, Any]:
    r = await client.get(f"{ctl.url}/api/v1/fleet")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def marks(body: dict[str, Any]) -> dict[str, bool]:
    return {n["node"]: n["in_quarantine"] for n in body["nodes"]}


async def test_the_fleet_shows_the_worker_process_inventory(tmp_path: Path,
                                                            processes: list[ControllerProcess]) -> None:
    async with FakeKube() as fake:
        fake.add_node("gpu-1", labels={"nvidia.com/gpu.present": "true"}, gpus=8)
        fake.add_node("gpu-2", labels={"nvidia.com/gpu.present": "true"}, gpus=8, taints=[MARK])
        fake.add_node("gpu-3", gpus=4)  # a GPU node by its allocatable GPUs alone, no discovery label
        fake.add_node("cpu-1", gpus=0)  # not a GPU node: not on the fleet page
        ctl = ControllerProcess(tmp_path, {**cluster_env(tmp_path, fake), **WORKER})
        processes.append(ctl)
        await ctl.start()
        worker_pid(ctl)  # the inventory lives in the worker process, not in the web process answering
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=20) as client:
            async def listed() -> bool:
                return (await fleet(client, ctl))["inventory"] is True
            await wait_until(listed, 60, "the worker process's inventory to reach the web process")

            body = await fleet(client, ctl)
            assert marks(body) == {"gpu-1": False, "gpu-2": True, "gpu-3": False}, body["nodes"]
            gpus = {n["node"]: n["gpus"] for n in body["nodes"]}
            assert {name: (g["gpus"], g["allocatable"]) for name, g in gpus.items()} == {
                "gpu-1": (8, 8), "gpu-2": (8, 8), "gpu-3": (4, 4)}
            assert gpus["gpu-2"]["taints"] == [f"{QUARANTINE_TAINT}=by-hand:NoSchedule"]
            assert gpus["gpu-1"]["taints"] == [] and gpus["gpu-3"]["taints"] == []
            # The breaker counts against the 3 GPU nodes the worker process sees, not an unknown fleet.
            assert body["headroom"]["gpu_nodes"] == 3 and body["headroom"]["fleet_known"] is True, body["headroom"]
            assert body["headroom"]["effective_limit"] <= 3

            # A mark put on and one taken off by hand reach the page through the watch and the link.
            fake.write("nodes", None, "gpu-1", {"spec": {"taints": [MARK]}})
            fake.write("nodes", None, "gpu-2", {"spec": {"taints": []}})

            async def moved() -> bool:
                return marks(await fleet(client, ctl)) == {"gpu-1": True, "gpu-2": False, "gpu-3": False}
            await wait_until(moved, 30, "the changed quarantine marks on the fleet page")

            page = await client.get(f"{ctl.url}/fleet")
            assert page.status_code == 200
            for name in ("gpu-1", "gpu-2", "gpu-3"):
                assert name in page.text
            assert "cpu-1" not in page.text
