"""The return condition is visible before it matters: a quarantined node's remediation says from the start what
must happen before the node returns (a new boot, then which GPU checks) in the API, `remediator describe`,
`remediator simulate` and the remediation page; while the gate waits for the reboot the timeline holds one
start of the wait, not one per look; and a remediation being reverted is not shown as finished."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from typer.testing import CliRunner

from remediator.api.app import create_app
from remediator.cli.main import app as cli_app
from tests.cli.test_cli import run
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.helpers import am_alert, am_payload, xid_labels
from tests.serving import served_on_loopback


@asynccontextmanager
async def served(cluster: Cluster) -> AsyncIterator[str]:
    """The cluster's controller under uvicorn on 127.0.0.1, for the CLI (the test drives the worker)."""
    web = create_app(cluster.settings, runtime=cluster.rt, run_worker=False)
    async with served_on_loopback(web) as base:
        yield base


async def describe(base: str, rem_id: str) -> str:
    env = {"REMEDIATOR_SERVER": base, "REMEDIATOR_TOKEN": None, "REMEDIATOR_CONFIG_FILE": None}
    result = await asyncio.to_thread(lambda: CliRunner().invoke(cli_app, ["describe", rem_id], env=env))
    assert result.exit_code == 0, result.output
    return result.stdout


async def detail(cluster: Cluster, rem_id: str) -> dict[str, Any]:
    body: dict[str, Any] = (await cluster.api.get(f"/api/v1/remediations/{rem_id}")).json()
    return body


async def test_the_gate_is_said_from_the_start_and_a_reboot_wait_is_one_entry(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    await cluster.worker.refresh_inventory()
    labels = xid_labels("gpu-1", 79)
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    boot = rem["context"]["node"]["boot_id"]

    # Quarantined, nothing failed yet: the gate is said already, with the boot ID it waits to see change.
    rebooted, validate = rem["return_gate"]
    assert (rebooted["name"], rebooted["kind"], rebooted["status"]) == ("rebooted", "reboot", None)
    assert rebooted["says"] == f"wait for node gpu-1 to run a new boot (a boot ID other than {boot}) and report Ready"
    assert (validate["name"], validate["kind"]) == ("validate", "validation")
    assert validate["says"].startswith("validate every GPU of the node: NVML checks (present, ")
    assert "DCGM diagnostic level 2 where DCGM is installed" in validate["says"]
    # The incident record (describe -o json, the bundle) says the same gate.
    record = (await cluster.api.get(f"/api/v1/remediations/{rem['id']}/record")).json()
    assert record["remediation"]["return_gate"] == rem["return_gate"]

    page = (await cluster.api.get(f"/remediations/{rem['id']}")).text
    gate = page[page.index('id="return-gate"'):]
    gate = gate[:gate.index("The quarantine is lifted only after")]
    assert "Before it returns to service" in gate and f"a boot ID other than {boot}" in gate
    assert "DCGM diagnostic level 2" in gate

    async with served(cluster) as base:
        text = await describe(base, rem["id"])
        assert "Return gate (before the node returns to service):" in text
        assert f"1. rebooted (await_reboot): wait for node gpu-1 to run a new boot (a boot ID other than {boot})" \
            in text
        assert "2. validate (validate_gpu): validate every GPU of the node" in text
        assert "\nFinished:" in text  # succeeded: it finished

        # The alert resolves: the undo starts at the gate, which waits for the reboot.
        await cluster.post(am_payload(am_alert(labels, status="resolved")))
        await cluster.settle()
        for _ in range(3):  # three more looks while the node still runs the same boot
            assert await cluster.rt.repo.wake_after_reboot("gpu-1") == 1
            await cluster.settle()
        waiting = await detail(cluster, rem["id"])
        assert waiting["state"] == "reverting" and waiting["finished_at"] is not None
        assert waiting["return_gate"][0]["status"] == "running"
        events = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
        started = [e for e in events if e["kind"] == "step.started" and e["data"]["step"] == "gate:rebooted"]
        assert len(started) == 1, [e["data"] for e in started]
        assert len([e for e in events if e["kind"] == "revert.waiting"]) == 1
        (row,) = [s for s in waiting["steps"] if s["name"] == "gate:rebooted"]
        assert row["attempts"] == 1

        # Reverting is not finished: neither describe nor the page says Finished.
        text = await describe(base, rem["id"])
        assert "\nFinished:" not in text and "State:" in text and "reverting" in text
        assert "1. rebooted (await_reboot) [running]:" in text
        page = (await cluster.api.get(f"/remediations/{rem['id']}")).text
        assert 'id="finished"' not in page and "<th>Finished</th>" not in page

        # The node reboots: the same step passes, and the timeline still has its one start.
        cluster.fake.reboot_node("gpu-1")
        await cluster.rt.repo.wake_after_reboot("gpu-1")
        await cluster.settle()
        done = await detail(cluster, rem["id"])
        assert done["state"] == "reverted"
        events = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
        kinds = [e["kind"] for e in events if e["data"].get("step") == "gate:rebooted"]
        assert kinds == ["step.started", "step.succeeded"]
        text = await describe(base, rem["id"])
        assert "\nFinished:" in text and "1. rebooted (await_reboot) [succeeded]:" in text


def test_simulate_says_the_return_gate() -> None:
    result = run("simulate", "remediator/bundled/samples/xid-79-fatal.json")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "  return to service: after its return gate:" in out
    assert "    1. rebooted: await_reboot - wait for node demo-gpu-node-1 to run a new boot (a boot ID other than " \
           "the one recorded at quarantine) and report Ready" in out
    assert "    2. validate: validate_gpu - validate every GPU of the node: NVML checks" in out
    assert "template error" not in out
    as_json = run("simulate", "remediator/bundled/samples/xid-79-fatal.json", "--json")
    assert as_json.returncode == 0, as_json.stderr
    (entry,) = json.loads(as_json.stdout)["alerts"]
    kinds = [(g["name"], g["kind"]) for g in entry["return_gate"]]
    assert kinds == [("rebooted", "reboot"), ("validate", "validation")]
