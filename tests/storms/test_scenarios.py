"""The storm scenarios of docs/scenarios, run through `remediator simulate --scenario FILE --seeds N` with a few seeds:
the driver rollout is named first and its nodes' faults are held (and only theirs), purely random faults name
nothing; a bad scenario file gets a clear error."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from remediator.cli.main import app

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scenarios"


def simulate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["simulate", *args])
    return result.exit_code, result.output


def test_the_driver_rollout_is_named_first_and_its_nodes_held() -> None:
    code, out = simulate("--scenario", str(DOCS / "driver-rollout.yaml"), "--seeds", "4", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["nodes"] == 2000
    summary = report["summary"]
    assert summary["named_rollout_first"] == 4
    assert summary["hold_precision"] == 1.0 and summary["outside_went_on"] > 0
    for run in report["runs"]:
        assert run["cause"]["key"] == "label:nvidia.com/cuda.driver-version.full"
        assert run["cause"]["value"] == "580.95.05" and run["detection_delay_s"] > 0
        assert run["held"] == run["held_on_rollout"] > 0


def test_random_faults_name_nothing() -> None:
    code, out = simulate("--scenario", str(DOCS / "random-faults.yaml"), "--seeds", "4")
    assert code == 0, out
    assert "a cause named in 0 of 4 seeds" in out and "false-positive rate: 0.000" in out


def test_a_bad_scenario_is_refused_with_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: 10\nbase_rate_per_node_hour: 0.1\nrollout: {label: a, value: b, fraction: 2}\n")
    code, out = simulate("--scenario", str(bad))
    assert code == 2 and "rollout.fraction: at most 1" in out
    code, out = simulate()
    assert code == 2 and "--scenario FILE" in out
