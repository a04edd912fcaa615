"""One incident record: `describe -o json|yaml` (whole), `bundle` and GET .../bundle (one tar.gz for a postmortem
whose audit segment verifies with the key), and `audit export` with filters, through a real controller served by
uvicorn on 127.0.0.1 (a plan-only controller whose playbook has a step that needs approval) and on the database."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from remediator.cli.main import app
from tests.approvals.harness import TOKEN, gated_controller
from tests.cli.test_client_cli import Live
from tests.serving import served_on_loopback

KEY = "0123456789abcdef0123456789abcdef"
LONG = "the node's PSU was swapped by the vendor; " * 11  # over 100 characters: the text form cuts it


@pytest.fixture
async def keyed(tmp_path: Path) -> AsyncIterator[Live]:
    async with gated_controller(tmp_path, audit_key=KEY) as gated, served_on_loopback(gated.app) as base:
        home = tmp_path / "xdg"
        home.mkdir()
        yield Live(gated, base, home)


async def _rejected(live: Live) -> str:
    """A remediation with an alert and an approval request, cancelled with a long reason; another node's alert."""
    rem = await live.gated.fire()
    other = "GPU-8e6a1c2d-0000-4000-8000-000000000002"
    await live.gated.fire({**rem.alert_labels, "Hostname": "gpu-node-2", "UUID": other})
    r = await live.gated.client.post(f"/api/v1/remediations/{rem.id}/cancel",
                                     json={"by": "carol", "reason": LONG.strip()},
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    return rem.id


async def test_describe_json_and_yaml_print_the_whole_record(keyed: Live) -> None:
    rem_id = await _rejected(keyed)
    text = await keyed.cli("describe", rem_id)
    assert text.exit_code == 0 and "..." in text.stdout  # the text form cuts long details
    result = await keyed.cli("describe", rem_id[:8], "-o", "json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["remediation"]["id"] == rem_id and record["remediation"]["state"] == "cancelled"
    assert [s["name"] for s in record["remediation"]["planned_steps"]] == ["mark", "drain", "tell"]
    assert record["remediation"]["steps"] and all("output" in s for s in record["remediation"]["steps"])
    kinds = [e["kind"] for e in record["audit"]]
    assert "approval.requested" in kinds and "state.cancelled" in kinds
    cancelled = next(e for e in record["audit"] if e["kind"] == "state.cancelled")
    assert LONG.strip() in json.dumps(cancelled["data"])  # whole, never cut with "..."
    assert all(e["ts"].endswith("+00:00") for e in record["audit"])
    [approval] = record["approvals"]
    assert approval["step_name"] == "drain" and approval["status"] == "superseded"
    [alert] = record["alerts"]  # the other node's alert is not this remediation's
    assert alert["labels"]["Hostname"] == "gpu-node-1" and alert["labels"]["xid"] == "79"
    assert record["definitions"]["version"] == record["remediation"]["definitions_version"]
    assert record["node"]["live"] is None and "plan-only" in record["node"]["live_note"]
    as_yaml = await keyed.cli("describe", rem_id, "-o", "yaml")
    assert as_yaml.exit_code == 0, as_yaml.output
    assert yaml.safe_load(as_yaml.stdout)["audit"] == record["audit"]


async def test_bundle_writes_one_archive_whose_segment_verifies_with_the_key(keyed: Live, tmp_path: Path) -> None:
    rem_id = await _rejected(keyed)
    out = tmp_path / "incident.tar.gz"
    result = await keyed.cli("bundle", rem_id[:8], "-o", str(out))
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stdout
    with tarfile.open(out) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    for name in ("README.md", "manifest.json", "remediation.json", "timeline.json", "steps.json", "approvals.json",
                 "alerts.json", "node.json", "pods.json", "agent-readings.json", "audit.jsonl",
                 "audit-segment.jsonl", "definitions.json", "sha256sums.txt"):
        assert name in files, name
    manifest = json.loads(files["manifest.json"])
    for name, digest in manifest["sha256"].items():
        assert hashlib.sha256(files[name]).hexdigest() == digest, name
    assert "remediator audit verify --segment audit-segment.jsonl" in files["README.md"].decode()
    rows = [json.loads(line) for line in files["audit.jsonl"].decode().splitlines()]
    segment = [json.loads(line) for line in files["audit-segment.jsonl"].decode().splitlines()]
    assert {r["id"] for r in rows} <= {r["id"] for r in segment}
    assert any(r["remediation_id"] != rem_id for r in segment)  # the other alert's rows lie in between
    assert json.loads(files["alerts.json"])[0]["labels"]["Hostname"] == "gpu-node-1"

    seg = tmp_path / "segment.jsonl"
    seg.write_bytes(files["audit-segment.jsonl"])
    env = {"REMEDIATOR_AUDIT_KEY": KEY, "REMEDIATOR_DATABASE_URL": "sqlite+aiosqlite:///" + str(tmp_path / "x.db")}
    ok = CliRunner().invoke(app, ["audit", "verify", "--segment", str(seg)], env=env)
    assert ok.exit_code == 0 and ok.stdout.startswith(f"ok: audit events {segment[0]['id']} to "), ok.output
    wrong_key = CliRunner().invoke(app, ["audit", "verify", "--segment", str(seg)],
                                   env={**env, "REMEDIATOR_AUDIT_KEY": "f" * 32})
    assert wrong_key.exit_code == 1
    edited = [dict(r) for r in segment]
    edited[1]["actor"] = "someone-else"
    seg.write_text("".join(json.dumps(r) + "\n" for r in edited))
    bad = CliRunner().invoke(app, ["audit", "verify", "--segment", str(seg)], env=env)
    assert bad.exit_code == 1 and f"audit event {segment[1]['id']}: content does not match" in bad.stdout

    # The same archive over HTTP; an existing file is not overwritten.
    async with httpx.AsyncClient(base_url=keyed.base) as client:
        r = await client.get(f"/api/v1/remediations/{rem_id}/bundle", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
        assert f'filename="remediation-{rem_id}.tar.gz"' in r.headers["content-disposition"]
        with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
            assert {m.name.split("/", 1)[1] for m in tar.getmembers()} == set(files)
        missing = await client.get("/api/v1/remediations/nope/bundle", headers={"Authorization": f"Bearer {TOKEN}"})
        assert missing.status_code == 404
        assert (await client.get(f"/api/v1/remediations/{rem_id}/bundle")).status_code == 401
    again = await keyed.cli("bundle", rem_id, "-o", str(out))
    assert again.exit_code == 2 and "exists" in again.output


async def test_audit_export_filters_through_the_api_and_the_database(keyed: Live) -> None:
    rem_id = await _rejected(keyed)
    every = await keyed.cli("audit", "export", "--server", keyed.base)
    assert every.exit_code == 0, every.output
    rows = [json.loads(line) for line in every.stdout.splitlines()]
    assert rows and all(r["ts"].endswith("+00:00") for r in rows)
    mine = await keyed.cli("audit", "export", "--remediation", rem_id[:8])  # REMEDIATOR_SERVER from the env
    assert mine.exit_code == 0, mine.output
    ids = [json.loads(line)["id"] for line in mine.stdout.splitlines()]
    assert ids and ids == [r["id"] for r in rows if r["remediation_id"] == rem_id]
    other = await keyed.cli("audit", "export", "--node", "gpu-node-2")
    assert {json.loads(line)["remediation_id"] for line in other.stdout.splitlines()} - {None} == {
        r["remediation_id"] for r in rows if r["remediation_id"] not in (None, rem_id)
    }
    middle = rows[len(rows) // 2]
    since = await keyed.cli("audit", "export", "--since", middle["ts"])
    assert [json.loads(line)["id"] for line in since.stdout.splitlines()] == [
        r["id"] for r in rows if datetime.fromisoformat(r["ts"]) >= datetime.fromisoformat(middle["ts"])
    ]
    until = await keyed.cli("audit", "export", "--until", middle["ts"])
    assert [json.loads(line)["id"] for line in until.stdout.splitlines()] == [
        r["id"] for r in rows if datetime.fromisoformat(r["ts"]) < datetime.fromisoformat(middle["ts"])
    ]
    bad = await keyed.cli("audit", "export", "--since", "yesterday-ish")
    assert bad.exit_code == 2 and "--since" in bad.output

    # Straight from the database: the same rows, the same lines.
    db_env = {"REMEDIATOR_SERVER": None, "REMEDIATOR_DATABASE_URL": keyed.gated.settings.database_url}
    direct = await keyed.cli("audit", "export", "--remediation", rem_id[:8], **db_env)
    assert direct.exit_code == 0, direct.output
    assert direct.stdout == mine.stdout
    ambiguous = await keyed.cli("audit", "export", "--remediation", "zz", **db_env)
    assert ambiguous.exit_code == 2
