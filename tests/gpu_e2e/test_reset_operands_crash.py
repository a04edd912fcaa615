"""A controller killed (SIGKILL) while a GPU reset with the GPU Operator's operands off the node is under way.

`remediator serve` runs the shipped reset-gpu playbook for an Xid alert against the strict fake API server and
the node agent on the fake NVML. A small HTTP relay in front of the node agent holds the reset request, so the
controller dies with the operands' labels "false" and the reset sent but not answered; the relay then lets the
request through (the agent resets the GPU once, for nobody). A new `serve` on the same database resumes the
step: it must put the labels back, wait for the operand pods to be Ready, and not reset the GPU again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from remediator.store.db import make_engine, make_sessionmaker
from remediator.store.models import AuditEvent
from tests.controller_process import ControllerProcess
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.gpu_e2e.conftest import NODE_IP, GpuNode, gpu_alert_labels
from tests.gpu_e2e.test_reset_operands import (
    LABELS,
    OPERANDS,
    GpuOperator,
    _ready,
    labels_now,
    operator,  # noqa: F401  (the reconciler's fixture)
)
from tests.helpers import am_alert, am_payload
from tests.replicas.test_guard import TOKEN as WEBHOOK_TOKEN
from tests.replicas.test_guard import _env, _rems, wait_until
from tests.sidecar.conftest import TOKEN as SIDECAR_TOKEN
from tests.sidecar.conftest import free_port


class ResetRelay:
    """Relays HTTP/1.1 requests from the controller to the node agent (one at a time per connection, as the
    controller's client sends them), holding each real (not dry-run) GPU reset request until `release` is
    set. Counts the reset requests that reached it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port(NODE_IP)
        self.release = asyncio.Event()
        self.resets_held = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> ResetRelay:
        self.server = await asyncio.start_server(self._serve, NODE_IP, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        this = asyncio.current_task()
        assert this is not None
        self.tasks.add(this)  # cancelled on exit with the rest
        up_reader, up_writer = await asyncio.open_connection(NODE_IP, self.upstream_port)
        answer = asyncio.ensure_future(self._pipe(up_reader, writer))
        self.tasks.add(answer)
        released = False
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                body = await reader.readexactly(length) if length else b""
                method, path = head.split(b" ", 2)[:2]
                if method == b"POST" and path.endswith(b"/reset") and not (body and json.loads(body).get("dry_run")):
                    self.resets_held += 1
                    await self.release.wait()  # the controller may be gone by now: the agent still gets it
                    released = True
                up_writer.write(head + body)
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if released:  # the agent answers a reset sent for a controller that is gone: wait for that answer
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(answer), 20)
            answer.cancel()
            self.tasks.discard(answer)
            self.tasks.discard(this)
            up_writer.close()
            writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()


async def _audit(url: str) -> list[AuditEvent]:
    engine = make_engine(url)
    try:
        async with make_sessionmaker(engine)() as session:
            return list((await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all())
    finally:
        await engine.dispose()


@pytest.mark.timeout(180)
async def test_kill_9_mid_reset_restores_the_operands_and_does_not_reset_again(
    tmp_path: Path, gpu_node: GpuNode, operator: GpuOperator  # noqa: F811  (the fixture imported above)
) -> None:
    nvml = gpu_node.sidecar.nvml
    nvml.set("gpu.0.persistence", 1)
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    processes: list[ControllerProcess] = []
    async with ResetRelay(gpu_node.sidecar.sidecar.port) as relay:
        env = _env(url, write_kubeconfig(tmp_path / "kubeconfig", gpu_node.fake.url),
                   REMEDIATOR_SIDECAR_PORT=str(relay.port), REMEDIATOR_SIDECAR_TOKEN=SIDECAR_TOKEN,
                   REMEDIATOR_WORKER_PROCESS="false")
        try:
            first = ControllerProcess(tmp_path, env, name="first")
            processes.append(first)
            await first.start()
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {WEBHOOK_TOKEN}"}, timeout=30) as c:
                r = await c.post(f"{first.url}/api/v1/alerts",
                                 json=am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="119"))))
                assert r.status_code == 200, r.text

            async def reset_sent() -> bool:
                return relay.resets_held == 1

            await wait_until(reset_sent, 90, "the reset request to reach the node agent")
            # The operands are off the node and the reset is under way, unanswered: the controller dies here.
            assert labels_now(gpu_node.fake) == dict.fromkeys(LABELS, "false")
            assert all(gpu_node.fake.pod("gpu-operator", operator.pod_name(op)) is None for op in OPERANDS)
            first.kill()
            relay.release.set()  # the agent carries out the reset it was sent, for a controller that is gone

            async def reset_once() -> bool:
                return nvml.calls("nvmlDeviceRemoveGpu_v2") == 1

            await wait_until(reset_once, 30, "the agent to reset the GPU it was asked to")
            assert labels_now(gpu_node.fake) == dict.fromkeys(LABELS, "false")  # nobody put them back yet

            second = ControllerProcess(tmp_path, env, name="second")  # same database and replica ID
            processes.append(second)
            await second.start()

            async def finished() -> bool:
                rems = await _rems(url)
                return len(rems) == 1 and rems[0].state in ("succeeded", "failed")

            await wait_until(finished, 90, "the resumed remediation to finish")
        finally:
            for p in processes:
                await p.stop()
        [rem] = await _rems(url)
        assert labels_now(gpu_node.fake) == LABELS  # every label has its previous value again
        assert all(_ready(gpu_node.fake.pod("gpu-operator", operator.pod_name(op)) or {}) for op in OPERANDS)
        assert nvml.calls("nvmlDeviceRemoveGpu_v2") == 1  # the GPU was reset once, by the first controller
        assert relay.resets_held == 1  # the resumed step sent no reset of its own
        assert rem.state == "failed", (rem.state, rem.state_reason)  # a person judges the GPU: reset or not?
        assert "stopped during the reset" in (rem.state_reason or ""), rem.state_reason
        patches = [c.body for c in gpu_node.fake.requests("patch", "nodes") if c.ok
                   and "nvidia.com/gpu.deploy.dcgm-exporter" in str(c.body)]
        assert [p["metadata"]["labels"]["nvidia.com/gpu.deploy.dcgm-exporter"] for p in patches] == ["false", "true"]
        audit = [e for e in await _audit(url) if e.remediation_id == rem.id]
        failed = [e.data for e in audit if e.kind == "step.failed" and e.data.get("step") == "reset"]
        assert len(failed) == 1, [(e.kind, e.data) for e in audit]
        assert "the operands are back" in failed[0]["error"], failed[0]
        assert all(label in failed[0]["error"] for label in LABELS), failed[0]
        assert "not reset again" in failed[0]["error"], failed[0]
