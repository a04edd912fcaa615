"""`remediator replay`: stored alerts through edited definitions, compared with what actually happened."""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from remediator.actions.registry import default_registry
from remediator.definitions import load_definitions
from remediator.engine.bootstrap import action_params
from remediator.store.repository import utcnow
from remediator.tools.replay import ReplayReport, render_text, replay
from tests.cli.test_cli import run
from tests.helpers import am_alert, am_payload, xid_labels
from tests.reload.conftest import Controller, MakeController, remove_step

DEFS = Path(__file__).resolve().parent / "defs"  # fixed definitions, independent of the shipped ones
SINCE_DAYS = 7


def copy_defs(root: Path) -> tuple[Path, Path]:
    shutil.copytree(DEFS, root)
    return root / "rules", root / "playbooks"


def labels(alertname: str, node: str, **extra: str) -> dict[str, str]:
    return {"alertname": alertname, "Hostname": node, "UUID": f"GPU-{node}", "gpu": "0", **extra}


async def history(c: Controller) -> None:
    """Alerts as they arrived: two fatal Xids started quarantines, one repeat fell in the cooldown, a memory
    alert and a thermal one on another node, and a resolved alert."""
    alerts = [
        am_alert(xid_labels("gpu-1", 79, uuid="GPU-1"), annotations={"summary": "Xid 79"}),
        am_alert(xid_labels("gpu-3", 48, uuid="GPU-3"), annotations={"summary": "Xid 48"}),
        am_alert(labels("GPUMemoryUsageHigh", "gpu-2")),
        am_alert(labels("GPUTemperatureHigh", "gpu-4")),
    ]
    for alert in alerts:
        assert (await c.api.post("/api/v1/alerts", json=am_payload(alert))).status_code == 200
        await c.worker.drain_idle()
    repeat = am_alert(xid_labels("gpu-1", 79, uuid="GPU-1"), starts_at="2026-12-02T11:00:00Z")
    assert (await c.api.post("/api/v1/alerts", json=am_payload(repeat))).status_code == 200
    resolved = am_alert(labels("GPUTemperatureHigh", "gpu-4"), status="resolved")
    assert (await c.api.post("/api/v1/alerts", json=am_payload(resolved))).status_code == 200
    await c.worker.drain_idle()


Replay = Callable[..., Awaitable[ReplayReport]]


@pytest.fixture
async def recorded(make_controller: MakeController, tmp_path: Path) -> tuple[Controller, Replay]:
    rules, playbooks = copy_defs(tmp_path / "history")
    c = await make_controller(rules, playbooks)
    await history(c)
    rems = (await c.api.get("/api/v1/remediations")).json()
    assert sorted(r["node"] for r in rems) == ["gpu-1", "gpu-3", "gpu-4"]

    async def run_replay(rules_dir: Path, playbooks_dir: Path) -> ReplayReport:
        settings = c.settings.model_copy(update={"rules_dir": rules_dir, "playbooks_dir": playbooks_dir})
        defs = load_definitions(rules_dir, playbooks_dir, action_params(default_registry()))
        from datetime import timedelta

        return await replay(c.rt.repo, settings, defs, utcnow() - timedelta(days=SINCE_DAYS))

    return c, run_replay


def by_node(report: ReplayReport) -> dict[str, Any]:
    return {e.node: e for e in report.differences}


async def test_an_unchanged_set_shows_no_difference(recorded: tuple[Controller, Replay], tmp_path: Path) -> None:
    _, run_replay = recorded
    report = await run_replay(*copy_defs(tmp_path / "same"))
    assert report.differences == [], render_text(report)
    assert report.summary() == {"unchanged": 5, "would_start": 0, "would_not_start": 0, "changed": 0}
    assert report.skipped["resolved"] == 1
    assert "0 difference(s)" in render_text(report)


async def test_a_new_rule_shows_the_remediations_it_would_start(
    recorded: tuple[Controller, Replay], tmp_path: Path
) -> None:
    _, run_replay = recorded
    rules, playbooks = copy_defs(tmp_path / "edited")
    (rules / "memory.yaml").write_text(
        "rules:\n  - name: memory-high\n    match: {alertname: GPUMemoryUsageHigh}\n    playbook: record\n"
        "    params: {reason: GPUMemoryHigh}\n"
    )
    report = await run_replay(rules, playbooks)
    assert [e.kind for e in report.differences] == ["would_start"]
    entry = by_node(report)["gpu-2"]
    assert entry.actual["outcome"] == "unmatched"
    assert entry.replay["rule"] == "memory-high" and entry.replay["target"] == "gpu:gpu-2/GPU-gpu-2"
    assert entry.replay["steps"][0]["params"]["reason"] == "GPUMemoryHigh"
    assert "would start record on gpu:gpu-2/GPU-gpu-2 (rule memory-high); actually unmatched" in entry.changes


async def test_removing_a_drain_step_shows_the_change(recorded: tuple[Controller, Replay], tmp_path: Path) -> None:
    _, run_replay = recorded
    rules, playbooks = copy_defs(tmp_path / "edited")
    remove_step(playbooks / "quarantine.yaml", "drain")
    report = await run_replay(rules, playbooks)
    changed = by_node(report)
    assert sorted(changed) == ["gpu-1", "gpu-3"]
    for entry in changed.values():
        assert entry.kind == "changed"
        assert entry.changes == ["step drain (drain) would no longer run"]
        assert [s["name"] for s in entry.actual["steps"]] == ["taint", "cordon", "drain", "event"]
    assert report.summary()["unchanged"] == 3  # the cooldown repeat, the memory and the thermal alert
    text = render_text(report)
    assert "CHANGED" in text and "step drain (drain) would no longer run" in text


async def test_changed_parameters_and_a_removed_rule(recorded: tuple[Controller, Replay], tmp_path: Path) -> None:
    _, run_replay = recorded
    rules, playbooks = copy_defs(tmp_path / "edited")
    book = playbooks / "quarantine.yaml"
    book.write_text(book.read_text().replace("drain_pods: gpu", "drain_pods: all"))
    thermal = rules / "gpu.yaml"
    text = thermal.read_text()
    thermal.write_text(text[: text.index("  - name: thermal")])
    report = await run_replay(rules, playbooks)
    changed = by_node(report)
    assert changed["gpu-1"].changes == ["step drain: params.pods: 'gpu' -> 'all'"]
    assert changed["gpu-4"].kind == "would_not_start"
    assert changed["gpu-4"].changes[0].startswith("would not start record on gpu:gpu-4/GPU-gpu-4 (rule thermal")


async def test_the_command_line_gates_on_differences_and_prints_json(
    recorded: tuple[Controller, Replay], tmp_path: Path
) -> None:
    c, _ = recorded
    env = {"REMEDIATOR_DATABASE_URL": c.settings.database_url}
    same_rules, same_playbooks = copy_defs(tmp_path / "same")
    result = run("replay", "--since", f"{SINCE_DAYS}d", "--rules", str(same_rules), "--playbooks",
                 str(same_playbooks), "--fail-on-diff", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 difference(s)" in result.stdout

    rules, playbooks = copy_defs(tmp_path / "edited")
    remove_step(playbooks / "quarantine.yaml", "drain")
    result = run("replay", "--since", f"{SINCE_DAYS}d", "--rules", str(rules), "--playbooks", str(playbooks),
                 "--fail-on-diff", "--json", env=env)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["changed"] == 2
    assert {d["node"] for d in report["differences"]} == {"gpu-1", "gpu-3"}
    assert all(d["changes"] == ["step drain (drain) would no longer run"] for d in report["differences"])

    result = run("replay", "--rules", str(rules), "--playbooks", str(playbooks), env=env)
    assert result.returncode == 0  # without --fail-on-diff a difference is only reported


def test_replay_refuses_a_missing_database(tmp_path: Path) -> None:
    result = run("replay", env={"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'none.db'}"})
    assert result.returncode == 2 and "no database" in result.stderr
    assert not (tmp_path / "none.db").exists()
