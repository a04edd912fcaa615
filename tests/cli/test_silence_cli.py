"""`remediator silence add|list|expire` as a subprocess against a controller served on 127.0.0.1.

The controller is the plan-only test controller (tests/approvals/harness.py) under uvicorn; alerts go in
through its webhook and its worker decides them, so what the CLI creates is what the decision path reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.approvals.harness import TOKEN, Gated, gated_controller
from tests.helpers import am_alert, am_payload, xid_labels
from tests.serving import served_on_loopback

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    gated: Gated
    base: str
    home: Path

    async def run(self, *args: str, **env: str) -> tuple[int, str, str]:
        environment = {
            **os.environ, "REMEDIATOR_SERVER": self.base, "REMEDIATOR_TOKEN": TOKEN,
            "XDG_CONFIG_HOME": str(self.home), **env,
        }
        environment.pop("REMEDIATOR_CONFIG_FILE", None)
        environment.pop("REMEDIATOR_USER", None)
        environment.update(env)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "remediator.cli", *args, cwd=REPO, env=environment,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def fire(self, labels: dict[str, str]) -> None:
        r = await self.gated.client.post(
            "/api/v1/alerts", json=am_payload(am_alert(labels)), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert r.status_code == 200, r.text
        await self.gated.settle()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with gated_controller(tmp_path) as gated, served_on_loopback(gated.app) as base:
        home = tmp_path / "xdg"
        home.mkdir()
        yield Served(gated, base, home)


@pytest.mark.timeout(180)
async def test_add_list_expire_and_the_alert_shown_as_silenced(served: Served) -> None:
    code, out, err = await served.run(
        "silence", "add", "alertname=GPUXidError", 'Hostname=~"gpu-node-1[0-9]"', "xid!=13",
        "--duration", "2h", "--comment", "rack 4 maintenance", "--by", "Alice",
    )
    assert code == 0, err
    sid = out.strip()
    assert len(sid) == 36

    await served.fire(xid_labels("gpu-node-12", 79))
    await served.fire(xid_labels("gpu-node-2", 79, uuid="GPU-8e6a1c2d-0000-4000-8000-000000000002"))
    code, out, err = await served.run("get", "alerts", "-o", "wide")
    assert code == 0, err
    lines = out.splitlines()
    silenced = [line for line in lines if f"silenced ({sid[:8]})" in line]
    assert len(silenced) == 1 and f"silence {sid} by Alice: rack 4 maintenance" in silenced[0]
    assert any(" started " in f" {line} " for line in lines)  # gpu-node-2 is not matched
    assert served.gated.rt is not None
    assert [r.node for r in await served.gated.rt.repo.list_remediations()] == ["gpu-node-2"]

    code, out, err = await served.run("silence", "list")
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split()[:3] == ["ID", "MATCHERS", "STATE"]
    assert sid in row and 'alertname="GPUXidError" Hostname=~"gpu-node-1[0-9]" xid!="13"' in row
    assert " active " in row and "Alice" in row and "rack 4 maintenance" in row

    code, out, err = await served.run("silence", "expire", sid[:8], "--comment", "rack back")
    assert code == 0, err
    assert out.strip() == f"silence {sid} expired: now expired"
    code, out, _ = await served.run("silence", "list")
    assert out.strip() == "No silences found."
    code, out, _ = await served.run("silence", "list", "--expired", "-o", "json")
    (shown,) = json.loads(out)
    assert shown["id"] == sid and shown["status"]["state"] == "expired" and shown["createdBy"] == "Alice"
    assert shown["actor"] == "api" and shown["expiredBy"] == "api"

    events = await served.gated.rt.repo.list_audit(limit=10000)
    kinds = [(e.kind, e.actor, (e.data or {}).get("comment")) for e in events if e.kind.startswith("silence.")]
    assert kinds == [("silence.created", "api", "rack 4 maintenance"), ("silence.expired", "api", "rack 4 maintenance")]


@pytest.mark.timeout(180)
async def test_refusals_and_their_exit_codes(served: Served) -> None:
    code, _, err = await served.run("silence", "add", 'Hostname="gpu-node-1', "--comment", "x")
    assert code == 2 and "closing quote" in err
    code, _, err = await served.run("silence", "add", "alertname=GPUXidError")
    assert code == 2 and "--comment" in err
    code, _, err = await served.run("silence", "add", "alertname=GPUXidError", "--comment", "x", "--end", "tomorrow")
    assert code == 2 and "RFC 3339" in err
    # The controller's refusal names the field: a silence that would hold every alert.
    code, _, err = await served.run("silence", "add", 'Hostname=~".*"', "--comment", "x")
    assert code == 1 and "422" in err and "matchers" in err and "empty string" in err
    code, _, err = await served.run("silence", "expire", "0123abcd")
    assert code == 3 and "no silence" in err
    code, out, _ = await served.run("silence", "list", "-o", "json")
    assert json.loads(out) == []
