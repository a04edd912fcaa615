"""A non-editable `pip install .` serves the operator docs at /docs, so the UI's runbook links (state badges
-> /docs/operations.md#state-<state>) work where the checkout is gone: in a venv installed from a copy that is
then deleted, and in the image, which installs the same way (tests/deploy/test_dockerfile.py).

The install is the README's, made to work offline as tests/cli/test_readme_walk.py does it (the dependencies
installed beside the tests, no index, no build isolation); `remediator serve` then runs from a folder without
docs/, with no REMEDIATOR_DOCS_DIR, so only the installed copy can answer.
"""

from __future__ import annotations

import re
import shutil
import sysconfig
from pathlib import Path

import httpx
import pytest

from tests.cli.test_readme_walk import fresh_copy, in_one_shell, installed_offline, newcomer_env, serving, wait_until
from tests.controller_process import free_port


@pytest.mark.timeout(180)
def test_a_non_editable_install_serves_the_runbook_without_the_checkout(tmp_path: Path) -> None:
    checkout, home, elsewhere = tmp_path / "gpu-remediator", tmp_path / "home", tmp_path / "run"
    fresh_copy(checkout)
    home.mkdir()
    elsewhere.mkdir()
    venv = checkout / ".venv"
    env = newcomer_env(home)
    ran, _ = in_one_shell([installed_offline("python3 -m venv .venv", venv) or "false",
                           installed_offline("pip install .", venv) or "false"], env, checkout)
    for step in ran:
        step.ok()
    shutil.rmtree(checkout / "docs")  # nothing left to find beside the package or in a working directory

    prefix = Path(sysconfig.get_path("data", vars={"base": str(venv), "platbase": str(venv)}))
    assert (prefix / "share" / "gpu-remediator" / "docs" / "operations.md").is_file()
    port = free_port()
    log = tmp_path / "serve.log"
    with serving(f"{venv}/bin/remediator serve --port {port}", env, elsewhere, log) as proc:
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert proc.poll() is None, f"remediator serve exited {proc.returncode}:\n{log.read_text()}"
            return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
        wait_until("remediator serve to answer /readyz", ready)
        page = httpx.get(f"{base}/docs/operations.md", timeout=5)
        assert page.status_code == 200, page.text
        # The anchors the state badges and the alerts' runbook_url point at.
        assert re.search(r'<h3 id="state-held">', page.text), page.text[:2000]
        assert 'id="alert-remediatorcontrollerdown"' in page.text
        other = httpx.get(f"{base}/docs/ui.md", timeout=5)
        assert other.status_code == 200 and "<h1" in other.text
    assert "Traceback" not in log.read_text(), log.read_text()
