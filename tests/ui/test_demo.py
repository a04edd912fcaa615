"""`remediator demo` end to end in a subprocess: samples posted over HTTP, plans printed, one approval."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from remediator.demo import SAMPLES_DIR


def test_demo_plans_every_sample_and_prints_an_approval_page(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATOR_")}
    env["TMPDIR"] = str(tmp_path)
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
    assert "awaiting_approval" in out and "succeeded" in out
    assert re.search(r"Approval page \(.+\): http://127\.0\.0\.1:\d+/approvals/[A-Za-z0-9_-]{43}", out)
    assert re.search(r"Web UI: http://127\.0\.0\.1:\d+/", out)
    assert "PLAN-ONLY" in done.stderr or "plan-only" in out
    assert not list(tmp_path.glob("remediator-demo-*")), "the temporary directory was left behind"
