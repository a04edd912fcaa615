"""Every benchmark script starts the way its docstring says (`python bench/<name>.py`), from a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_") and p.name != "bare_app.py"
)


def test_every_script_is_listed() -> None:
    assert {"ingest.py", "drain.py", "storm.py", "sidecar.py", "e2e.py", "reads.py", "fleet.py", "decide.py"} <= set(
        SCRIPTS
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_as_documented(script: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, f"bench/{script}", "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


    assert {"ingest.py", "drain.py", "storm.py", "sidecar.py", "e2e.py", "reads.py", "fleet.py", "decide.py"} <= set(
        SCRIPTS
    )
