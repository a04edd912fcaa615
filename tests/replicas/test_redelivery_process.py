"""`remediator serve` over real HTTP: Alertmanager's re-delivery of a still-firing alert (the same fingerprint
and startsAt) after its remediation ended without running starts a new one, in one process and with the
worker in a process of its own (the web process spools the webhook; the worker moves it in and decides).

The remediation ends without running because the API refuses to list the node's pods (403, as when the
controller's ServiceAccount lacks the permission) before any step; once that is fixed, the next repeat of the
alert is decided again and remediates. A further repeat, after that remediation ran, decides nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest

from tests.controller_process import ControllerProcess
from tests.fakekube.server import Call, FakeKube
from tests.helpers import am_payload, shipped_xid_alert
from tests.replicas.test_guard import TOKEN, _audit_kinds, _rems, wait_until
from tests.replicas.test_worker_process import ONE_PROCESS, WORKER, cluster_env, one_gpu_node, worker_env

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("worker_process", [False, True], ids=["one-process", "worker-process"])
async def test_a_repeat_after_a_remediation_that_did_not_run_is_decided_again(
    tmp_path: Path, processes: list[ControllerProcess], worker_process: bool
) -> None:
    url = worker_env(tmp_path)["REMEDIATOR_DATABASE_URL"]
    refusing = [True]

    def refuse(call: Call) -> None:
        if refusing[0]:
            raise kmock.KubernetesError(status=403, reason="Forbidden",
                                        message='pods is forbidden: cannot list resource "pods"')

    async with FakeKube() as fake:
        one_gpu_node(fake)
        fake.before("list", "pods", refuse, times=10_000)
        mode = WORKER if worker_process else ONE_PROCESS
        ctl = ControllerProcess(tmp_path, {**cluster_env(tmp_path, fake), **mode})
        processes.append(ctl)
        await ctl.start()
        alert = shipped_xid_alert("gpu-1", 79)  # Alertmanager sends the same alert, startsAt and all, each time
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:

            async def deliver() -> dict[str, Any]:
                r = await client.post(f"{ctl.url}/api/v1/alerts", json=am_payload(alert))
                assert r.status_code == 200, r.text
                answer: dict[str, Any] = r.json()
                return answer

            async def states(*want: str) -> bool:
                return [r.state for r in await _rems(url)] == list(want)

            assert (await deliver())["repeats"] == 0

            async def failed() -> bool:
                return await states("failed")

            await wait_until(failed, 60, "the remediation to end failed")
            (first,) = await _rems(url)
            assert first.crashes == 0 and (first.state_reason or "").startswith("reading the context failed: ")
            assert not [c for c in fake.requests() if c.verb in ("patch", "update", "evict")]

            refusing[0] = False  # the permission is granted; Alertmanager's repeat_interval comes round
            assert (await deliver())["repeats"] == 1

            async def remediated() -> bool:
                return await states("failed", "succeeded")

            await wait_until(remediated, 90, "the repeat to start a remediation that succeeds")
            kinds = await _audit_kinds(url)
            assert kinds.count("alert.redelivered") == 1 and kinds.count("remediation.created") == 2

            assert (await deliver())["repeats"] == 1  # after a remediation that ran: a repeat, nothing more

            async def moved() -> bool:
                alerts = (await client.get(f"{ctl.url}/api/v1/alerts")).json()
                return len(alerts) == 3 and all(a["state"] != "new" for a in alerts)

            await wait_until(moved, 30, "the third delivery to be stored")
            assert await states("failed", "succeeded")
            assert (await _audit_kinds(url)).count("alert.redelivered") == 1
