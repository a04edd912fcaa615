"""`remediator demo` end to end in a subprocess: samples posted over HTTP, plans printed, one approval."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from remediator.cli.demo import DEMO_RULE, SAMPLES_DIR, prepare_definitions, shipped_playbook


def test_demo_plans_every_sample_and_prints_an_approval_page(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATOR_")}
    env["TMPDIR"] = str(tmp_path)
    # this tree's code, not whichever copy is installed (the demo runs from another directory)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "remediator.cli", "demo", "--port", "0", "--exit-after-posting"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    samples = sorted(p.name for p in SAMPLES_DIR.glob("*.json"))
    assert len(samples) == 5
    for name in samples:
        assert f"posted {name}: HTTP 200" in out
    assert len(re.findall(r"/remediations/[0-9a-f-]{36}", out)) == 5
    assert "awaiting_approval" in out and "planned" in out and "succeeded" not in out
    assert re.search(r"Approval page \(.+\): http://127\.0\.0\.1:\d+/approvals/[A-Za-z0-9_-]{43}", out)
    assert re.search(r"Web UI: http://127\.0\.0\.1:\d+/", out)
    assert "PLAN-ONLY" in done.stderr or "plan-only" in out
    assert not list(tmp_path.glob("remediator-demo-*")), "the temporary directory was left behind"
    # the override is announced, naming the rule, the playbook it gates and why
    shipped = shipped_playbook()
    override = next(line for line in out.splitlines() if line.startswith("Demo override:"))
    assert DEMO_RULE in override and f"{shipped}-approval" in override and "approval page" in override
    assert f"the shipped rules run {shipped} without asking" in override
    assert "Rules and playbooks: the bundled ones" in out
    # each remediation: how to reproduce it with the CLI, and how to look at it on this server
    port = re.search(r"http://127\.0\.0\.1:(\d+)/", out)
    assert port is not None
    ids = re.findall(r"/remediations/([0-9a-f-]{36})", out)
    for rem_id in ids:
        assert f"remediator describe {rem_id} --server http://127.0.0.1:{port.group(1)}" in out
    for name in samples:
        assert f"remediator simulate {SAMPLES_DIR / name}" in out
    assert f"the shipped rules plan {shipped}; the demo override sent it to {shipped}-approval" in out


def test_the_demo_override_is_a_gated_copy_of_the_shipped_playbook(tmp_path: Path) -> None:
    rules, playbooks, override = prepare_definitions(tmp_path)
    shipped = (playbooks / f"{override.shipped}.yaml").read_text()
    gated = (playbooks / f"{override.playbook}.yaml").read_text()
    assert override.playbook == f"{override.shipped}-approval" and override.rule == DEMO_RULE
    lines = gated.splitlines()
    added = next(i for i, line in enumerate(lines) if line.strip() == "approval: required")
    assert lines[added - 1].strip() == "action: drain"  # the drain waits for a person, nothing else changes
    del lines[added]
    assert "\n".join(lines).replace(f"name: {override.playbook}", f"name: {override.shipped}", 1) == shipped.rstrip(
        "\n"
    )
    assert DEMO_RULE in (rules / "demo-approval.yaml").read_text()
    assert override.shipped in override.line() and override.playbook in override.line()
