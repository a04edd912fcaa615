"""The step error boundary and the crash backoff: no error inside a step, and no crash, loops the worker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from remediator.store.models import Remediation
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.definitions import NOTE_PLAYBOOK, NOTE_RULE, definitions, note_alert
from tests.helpers import am_payload

BROKEN_TEMPLATE = """name: note-node
target: node
steps:
  - name: taint
    action: taint
    params: {key: example.com/noted, value: "yes", effect: NoSchedule}
  - name: note
    action: annotate
    params:
      key: example.com/note
      value: "seen on {{ alert.labels.no_such_label }}"
  - name: cordon
    action: cordon
"""

BROKEN_CONDITION = """name: note-node
target: node
steps:
  - name: maybe
    action: annotate
    when: alert.labels.no_such_label == "x"
    on_failure: continue
    params: {key: example.com/maybe, value: "v"}
  - name: cordon
    action: cordon
"""


def crash_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "crashed" in r.getMessage()]


async def run_until(
    cluster: Cluster, done: Callable[[], Awaitable[bool]], *, timeout: float = 20.0
) -> None:
    """Run worker iterations (and what they dispatch) until `done()` holds; fail at the deadline."""
    async with asyncio.timeout(timeout):
        while not await done():
            await cluster.worker.run_once()
            running = [t for t in cluster.worker._running.values() if not t.done()]
            if running:
                await asyncio.wait(running)
            else:
                await asyncio.sleep(0.02)


async def test_a_template_error_at_run_time_fails_the_step_once(
    make_cluster: MakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="remediator")
    cluster: Cluster = await make_cluster(**definitions(tmp_path, NOTE_RULE, BROKEN_TEMPLATE))
    cluster.fake.add_node("gpu-1")
    await cluster.post(am_payload(note_alert("gpu-1", "hi")))
    await cluster.settle(10)

    rem = await cluster.only_remediation()
    assert rem["state"] == "failed"
    note = next(s for s in rem["steps"] if s["name"] == "note")
    assert note["status"] == "failed"
    assert note["error"].startswith("template error: UndefinedError:") and "no_such_label" in note["error"]
    assert "step note failed: template error: UndefinedError" in rem["state_reason"]
    assert [s["name"] for s in rem["steps"]] == ["taint", "note"]  # the cordon never ran
    assert rem["crashes"] == 0 and not crash_lines(caplog)
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    assert [e["data"]["step"] for e in audit if e["kind"] == "step.failed"] == ["note"]
    assert not [e for e in audit if e["kind"] == "remediation.crashed"]


async def test_a_condition_error_fails_the_step_and_the_playbook_policy_decides(
    make_cluster: MakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="remediator")
    cluster: Cluster = await make_cluster(**definitions(tmp_path, NOTE_RULE, BROKEN_CONDITION))
    cluster.fake.add_node("gpu-1")
    await cluster.post(am_payload(note_alert("gpu-1", "hi")))
    await cluster.settle(10)

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"  # on_failure: continue
    maybe = next(s for s in rem["steps"] if s["name"] == "maybe")
    assert maybe["status"] == "failed" and maybe["error"].startswith("condition error:")
    assert "no_such_label" in maybe["error"]
    node = cluster.fake.node("gpu-1")
    assert node is not None and node["spec"].get("unschedulable") is True
    assert "example.com/maybe" not in (node["metadata"].get("annotations") or {})
    assert not crash_lines(caplog)


async def test_an_unexpected_error_in_an_action_fails_the_step(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster: Cluster = await make_cluster(**definitions(tmp_path, NOTE_RULE, NOTE_PLAYBOOK))
    cluster.fake.add_node("gpu-1")
    cordon = cluster.rt.actions["cordon"]

    async def broken(ctx: Any, params: Any) -> Any:
        raise KeyError("spec")  # e.g. an answer without the field the action expects

    cordon.run = broken  # type: ignore[method-assign]
    await cluster.post(am_payload(note_alert("gpu-1", "hi")))
    await cluster.settle(10)
    rem = await cluster.only_remediation()
    assert rem["state"] == "failed" and rem["crashes"] == 0
    step = next(s for s in rem["steps"] if s["name"] == "cordon")
    assert step["status"] == "failed" and step["error"] == "KeyError: 'spec'"


async def test_a_crashing_remediation_backs_off_and_fails_after_max_crashes(
    make_cluster: MakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="remediator")
    cluster: Cluster = await make_cluster(
        **definitions(tmp_path, NOTE_RULE, NOTE_PLAYBOOK), max_crashes=4, crash_backoff="0.05", crash_backoff_max="1h"
    )
    cluster.fake.add_node("gpu-1")
    calls = 0

    async def explode(rem: Remediation, **_: object) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError(f"injected failure number {calls}")

    cluster.worker.executor._forward = explode  # type: ignore[assignment,method-assign]
    await cluster.post(am_payload(note_alert("gpu-1", "hi")))
    await cluster.worker.process_alerts()
    rem_id = (await cluster.api.get("/api/v1/remediations")).json()[0]["id"]

    async def failed() -> bool:
        rem = await cluster.rt.repo.get(rem_id)
        assert rem is not None
        return rem.state == "failed"

    await run_until(cluster, failed)

    rem = await cluster.rt.repo.get(rem_id)
    assert rem is not None
    assert calls == 4 and rem.crashes == 4
    assert rem.error == "RuntimeError: injected failure number 4"
    assert rem.state_reason == "crashed 4 times in a row; last error: RuntimeError: injected failure number 4"
    assert rem.lease_owner is None and rem.not_before is None
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem_id}")).json()
    crashed = [e for e in audit if e["kind"] == "remediation.crashed"]
    assert [e["data"]["crashes"] for e in crashed] == [1, 2, 3, 4]
    assert [e["data"]["backoff_seconds"] for e in crashed] == [0.05, 0.1, 0.2, None]  # doubling
    assert all(e["data"]["not_before"] for e in crashed[:3]) and crashed[-1]["data"]["not_before"] is None
    final = [e for e in audit if e["kind"] == "state.failed"]
    assert len(final) == 1 and final[0]["data"]["event"] == "crash"
    assert final[0]["data"]["error"] == "RuntimeError: injected failure number 4"
    assert len(crash_lines(caplog)) == 4  # one line per crash, no more
    api = (await cluster.api.get(f"/api/v1/remediations/{rem_id}")).json()
    assert api["error"] == rem.error and api["crashes"] == 4
    page = (await cluster.api.get(f"/remediations/{rem_id}")).text
    assert "crashed 4 time(s) in a row: RuntimeError: injected failure number 4" in page

    # Failed is final: nothing claims it again.
    await cluster.settle(5)
    assert calls == 4


async def test_the_crash_backoff_is_persisted_and_respected_after_a_restart(
    make_cluster: MakeCluster, tmp_path: Path
) -> None:
    defs = definitions(tmp_path, NOTE_RULE, NOTE_PLAYBOOK)
    first: Cluster = await make_cluster(**defs, crash_backoff="1h")
    first.fake.add_node("gpu-1")

    async def explode(rem: Remediation, **_: object) -> None:
        raise RuntimeError("injected")

    first.worker.executor._forward = explode  # type: ignore[assignment,method-assign]
    await first.post(am_payload(note_alert("gpu-1", "hi")))
    await first.settle(10)
    rem_id = (await first.api.get("/api/v1/remediations")).json()[0]["id"]
    rem = await first.rt.repo.get(rem_id)
    assert rem is not None and rem.state == "running" and rem.crashes == 1 and rem.not_before is not None
    assert await first.rt.repo.claim_remediations(first.rt.owner, 10, first.settings.lease_duration) == []
    await first.worker.stop()

    second: Cluster = await make_cluster(**defs, crash_backoff="1h")
    assert await second.rt.repo.claim_remediations(second.rt.owner, 10, second.settings.lease_duration) == []
    await second.settle(5)
    rem = await second.rt.repo.get(rem_id)
    assert rem is not None and rem.state == "running" and rem.crashes == 1
    assert not second.fake.writes("nodes")
    assert (await second.api.post(f"/api/v1/remediations/{rem_id}/cancel", json={"reason": "test"})).status_code == 200
