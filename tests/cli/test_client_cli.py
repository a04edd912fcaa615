"""The operator commands (`remediator get|describe|approve|...`) against a real controller served by uvicorn on
127.0.0.1: a plan-only controller whose playbook has a step that needs approval (tests/approvals/defs)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from remediator.cli.main import app
from remediator.store.flag_store import PAUSE_FLAG
from tests.approvals.harness import TOKEN, Gated, gated_controller
from tests.helpers import xid_labels
from tests.serving import served_on_loopback

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Live:
    gated: Gated
    base: str
    home: Path

    def env(self, **extra: str | None) -> dict[str, str | None]:
        """The CLI's environment: this server and token, and no config file but the one a test writes."""
        return {
            "REMEDIATOR_SERVER": self.base, "REMEDIATOR_TOKEN": TOKEN, "REMEDIATOR_CONFIG_FILE": None,
            "XDG_CONFIG_HOME": str(self.home), "REMEDIATOR_USER": None, **extra,
        }

    async def cli(self, *args: str, **env: str | None) -> Result:
        """Run a command in a thread, so this event loop keeps serving the requests it makes."""
        environment = self.env(**env)
        return await asyncio.to_thread(lambda: CliRunner().invoke(app, list(args), env=environment))

    async def rows(self, *args: str, **env: str | None) -> list[dict[str, object]]:
        result = await self.cli("get", *args, "-o", "json", **env)
        assert result.exit_code == 0, result.output
        rows: list[dict[str, object]] = json.loads(result.stdout)
        return rows


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Live]:
    # The harness runs the worker by hand (settle); no lifespan, so the app keeps that worker.
    async with gated_controller(tmp_path) as gated, served_on_loopback(gated.app) as base:
        home = tmp_path / "xdg"
        home.mkdir()
        yield Live(gated, base, home)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_cli_approves_an_awaiting_remediation_and_get_json_shows_it_running(live: Live) -> None:
    rem = await live.gated.fire()
    (row,) = await live.rows("remediations")
    assert row["id"] == rem.id and row["state"] == "awaiting_approval"
    result = await live.cli("approve", rem.id[:8], "--by", "alice", "--comment", "checked the node")
    assert result.exit_code == 0, result.output
    assert f"remediation {rem.id} approved: now running" in result.stdout
    (row,) = await live.rows("remediations")
    assert row["state"] == "running"
    assert await live.rows("remediations", "--state", "awaiting_approval") == []
    (approval,) = await live.gated.rt.repo.approvals_of(rem.id)
    assert approval.decided_by == "api:alice"
    events = await live.gated.rt.repo.list_audit(remediation_id=rem.id)
    assert any(e.kind == "state.running" and e.actor == "api:alice" for e in events)
    await live.gated.settle()
    (row,) = await live.rows("remediations")
    assert row["state"] == "planned"  # approved and run plan-only: planned, never succeeded
    assert [r["id"] for r in await live.rows("remediations", "--state", "planned")] == [rem.id]
    assert await live.rows("remediations", "--state", "succeeded") == []


async def test_get_remediations_as_table_wide_and_yaml(live: Live) -> None:
    rem = await live.gated.fire()
    table = await live.cli("get", "remediations")
    assert table.exit_code == 0, table.output
    header, line = table.stdout.splitlines()
    assert header.split() == ["ID", "STATE", "PLAYBOOK", "TARGET", "AGE", "REASON"]
    assert line.startswith(rem.id[:8] + " ") and rem.id not in line
    assert "awaiting_approval" in line and "gated-drain" in line and "gpu-node-1" in line
    assert re.search(r"\s\d+s\s", line), line  # AGE the way kubectl prints it
    wide = await live.cli("get", "rem", "-o", "wide")
    assert wide.exit_code == 0, wide.output
    header, line = wide.stdout.splitlines()
    for column in ("RULE", "GPU", "ALERTNAME", "CREATED (UTC)"):
        assert column in header
    assert line.startswith(rem.id) and "xid-fatal-gated" in line and "GPUXidError" in line
    assert "GPU-8e6a1c2d-0000-4000-8000-000000000001" in line
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line)
    as_yaml = await live.cli("get", "remediations", "-o", "yaml", "--node", "gpu-node-1")
    assert as_yaml.exit_code == 0, as_yaml.output
    (row,) = yaml.safe_load(as_yaml.stdout)
    assert row["id"] == rem.id and row["state"] == "awaiting_approval" and row["node"] == "gpu-node-1"
    empty = await live.cli("get", "remediations", "--node", "gpu-node-9")
    assert empty.exit_code == 0 and empty.stdout.strip() == "No remediations found."


async def test_get_approvals_and_alerts(live: Live) -> None:
    rem = await live.gated.fire()
    await live.gated.fire(xid_labels("gpu-node-2", 13))  # no rule: stored and processed, no remediation
    approvals = await live.cli("get", "approvals")
    assert approvals.exit_code == 0, approvals.output
    header, line = approvals.stdout.splitlines()
    assert header.split()[:3] == ["REMEDIATION", "STATUS", "STEP"]
    assert line.split()[:3] == [rem.id[:8], "pending", "drain"]
    assert await live.rows("approvals", "--state", "approved") == []
    (pending,) = await live.rows("approvals", "--state", "pending")
    assert pending["remediation_id"] == rem.id
    alerts = await live.cli("get", "alerts", "-o", "wide")
    assert alerts.exit_code == 0, alerts.output
    lines = alerts.stdout.splitlines()
    assert len(lines) == 3 and "FINGERPRINT" in lines[0]
    assert "gpu-node-2" in lines[1] and "gpu-node-1" in lines[2] and rem.id[:8] in lines[2]
    (one,) = await live.rows("alerts", "--node", "gpu-node-1")
    assert one["remediation_id"] == rem.id
    assert len(await live.rows("alerts", "--state", "firing")) == 2
    assert await live.rows("alerts", "--state", "resolved") == []
    assert len(await live.rows("alerts", "--limit", "1")) == 1


async def test_describe_shows_labels_steps_approval_and_events(live: Live) -> None:
    rem = await live.gated.fire()
    result = await live.cli("describe", rem.id[:6])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert re.search(rf"^ID:\s+{rem.id}$", text, re.M)
    assert re.search(r"^State:\s+awaiting_approval$", text, re.M)
    assert re.search(r"^Playbook:\s+gated-drain$", text, re.M)
    assert "Alert labels:" in text and "  xid=79" in text and "  Hostname=gpu-node-1" in text
    steps = text.split("Steps:", 1)[1].split("Approvals:", 1)[0]
    mark = next(line for line in steps.splitlines() if " mark " in line)
    drain = next(line for line in steps.splitlines() if " drain " in line)
    assert "planned" in mark and "required" in drain and "not run" in drain
    assert re.search(r"step 1 \(drain\): pending", text)
    events = text.split("Events:", 1)[1]
    assert "approval.requested" in events and "state.awaiting_approval" in events
    r = await live.gated.client.post(f"/api/v1/remediations/{rem.id}/reject", json={"by": "bob"},
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    text = (await live.cli("describe", rem.id)).stdout
    assert re.search(r"step 1 \(drain\): rejected by api:bob at \d{4}-.* UTC \(api\)", text)
    assert re.search(r"^State:\s+rejected$", text, re.M)


async def test_exit_codes_for_not_found_conflict_usage_and_unreachable(live: Live) -> None:
    rem = await live.gated.fire()
    missing = await live.cli("describe", "00000000-0000-4000-8000-000000000000")
    assert missing.exit_code == 3 and "404" in missing.stderr
    other = ("0" if rem.id[0] != "0" else "1") + "abc"
    unknown = await live.cli("approve", other)
    assert unknown.exit_code == 3 and f"no remediation with an ID starting {other!r}" in unknown.stderr
    assert (await live.cli("approve", rem.id)).exit_code == 0
    again = await live.cli("reject", rem.id)
    assert again.exit_code == 1 and "409" in again.stderr and "approved by api" in again.stderr
    assert (await live.cli("release", rem.id)).exit_code == 1  # not held: 409
    assert (await live.cli("get", "widgets")).exit_code == 2
    assert (await live.cli("get", "remediations", "-o", "xml")).exit_code == 2
    assert (await live.cli("get", "remediations", "--limit", "0")).exit_code == 2
    bad_state = await live.cli("get", "remediations", "--state", "exploded")
    assert bad_state.exit_code == 1 and "422" in bad_state.stderr
    nobody = await live.cli("get", "remediations", REMEDIATOR_SERVER=f"http://127.0.0.1:{free_port()}")
    assert nobody.exit_code == 4 and "cannot reach the controller" in nobody.stderr
    assert (await live.cli("pause", "--reason", "t", REMEDIATOR_SERVER="ftp://127.0.0.1")).exit_code == 2
    wrong = await live.cli("get", "remediations", REMEDIATOR_TOKEN="nope")
    assert wrong.exit_code == 1 and "401" in wrong.stderr and "REMEDIATOR_TOKEN" in wrong.stderr


async def test_cancel_revert_pause_and_resume(live: Live) -> None:
    rem = await live.gated.fire()
    assert (await live.cli("revert", rem.id)).exit_code == 1  # nothing finished to undo yet: 409
    result = await live.cli("cancel", rem.id[:8], "--reason", "test", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["state"] == "cancelled"
    paused = await live.cli("pause", "--reason", "test")
    assert paused.exit_code == 0 and "paused" in paused.stdout
    assert (await live.gated.rt.repo.get_flag(PAUSE_FLAG) or {}).get("paused") is True
    assert (await live.cli("resume")).exit_code == 0
    assert (await live.gated.rt.repo.get_flag(PAUSE_FLAG) or {}).get("paused") is False


async def test_return_to_service_with_reason_skips_and_by(live: Live) -> None:
    rem = await live.gated.fire()
    assert rem.state == "awaiting_approval"
    missing = await live.cli("return", rem.id[:8])
    assert missing.exit_code == 2 and "--reason" in missing.output
    refused = await live.cli("revert", rem.id)
    assert refused.exit_code == 1 and "409" in refused.stderr and "use `return`" in refused.stderr
    result = await live.cli(
        "return", rem.id[:8], "--reason", "hardware swapped", "--skip-reboot", "--skip-validation", "--by", "alice",
        "-o", "json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["state"] == "reverting"
    await live.gated.settle()
    (row,) = await live.rows("remediations")
    assert row["state"] == "returned"
    assert (await live.rows("remediations", "--state", "returned"))[0]["id"] == rem.id
    (approval,) = await live.gated.rt.repo.approvals_of(rem.id)
    assert approval.decision == "superseded" and approval.decided_by == "api:alice"
    events = await live.gated.rt.repo.list_audit(remediation_id=rem.id)
    (returned,) = [e for e in events if e.kind == "state.returned"]
    assert returned.actor == "api:alice"
    assert returned.data["return"]["reason"] == "hardware swapped"
    assert returned.data["return"]["skip"] == ["reboot", "validation"]
    again = await live.cli("return", rem.id, "--reason", "again")
    assert again.exit_code == 1 and "409" in again.stderr and "holds nothing" in again.stderr
    plain = await live.cli("return", rem.id, "--reason", "again", REMEDIATOR_USER="bob")
    assert plain.exit_code == 1  # the same refusal whoever asks; nothing recorded
    assert [e.kind for e in await live.gated.rt.repo.list_audit(remediation_id=rem.id)] == [e.kind for e in events]


async def test_server_and_token_from_the_config_file(live: Live, tmp_path: Path) -> None:
    rem = await live.gated.fire()
    no_env = {"REMEDIATOR_SERVER": None, "REMEDIATOR_TOKEN": None}
    default = live.home / "remediator" / "config.yaml"
    default.parent.mkdir()
    default.write_text(yaml.safe_dump({"server": live.base, "token": TOKEN}))
    assert [r["id"] for r in await live.rows("remediations", **no_env)] == [rem.id]
    other = tmp_path / "elsewhere.yaml"
    other.write_text(yaml.safe_dump({"server": live.base}))  # no token: the API refuses
    refused = await live.cli("get", "remediations", REMEDIATOR_CONFIG_FILE=str(other), **no_env)
    assert refused.exit_code == 1 and "401" in refused.stderr
    # The environment wins over the file.
    assert len(await live.rows("remediations", REMEDIATOR_CONFIG_FILE=str(other), REMEDIATOR_SERVER=None)) == 1
    other.write_text("- not a mapping\n")
    assert (await live.cli("get", "remediations", REMEDIATOR_CONFIG_FILE=str(other))).exit_code == 2
    missing = await live.cli("get", "remediations", REMEDIATOR_CONFIG_FILE=str(tmp_path / "none.yaml"))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr


async def _run(args: list[str], env: Mapping[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "remediator.cli", *args, cwd=REPO, env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_entry_point_and_shell_completion_of_commands_and_ids(live: Live) -> None:
    rem = await live.gated.fire()
    env = {"REMEDIATOR_SERVER": live.base, "REMEDIATOR_TOKEN": TOKEN, "XDG_CONFIG_HOME": str(live.home)}
    code, out, err = await _run(["get", "approvals", "-o", "json"], env)
    assert code == 0, err
    assert [r["remediation_id"] for r in json.loads(out)] == [rem.id]
    bash = {**env, "_REMEDIATOR_COMPLETE": "complete_bash"}
    code, out, _ = await _run([], {**bash, "COMP_WORDS": "remediator desc", "COMP_CWORD": "1"})
    assert code == 0 and out.split() == ["describe"]
    code, out, _ = await _run([], {**bash, "COMP_WORDS": f"remediator approve {rem.id[:4]}", "COMP_CWORD": "2"})
    assert code == 0 and out.split() == [rem.id]
    code, out, _ = await _run([], {**bash, "COMP_WORDS": "remediator release ", "COMP_CWORD": "2"})
    assert code == 0 and out.split() == []  # nothing is held
    code, out, err = await _run([], {"_REMEDIATOR_COMPLETE": "source_bash"})  # what --install-completion writes
    assert code == 0 and "_REMEDIATOR_COMPLETE=complete_bash" in out, err


# What a terminal acts on (ESC, BEL, CR, backspace, DEL, the one-byte CSI 0x9b, a bidi override and isolate, a
# newline): an alert label carrying them would retitle the terminal, clear it, or make `describe` lie.
EVIL = "\x1b]0;pwned\x07\x1b[2J\rok\x08\x7f\x9b31m\u202eevil\u2066\nState: succeeded"
SHOWN = r"\x1b]0;pwned\x07\x1b[2J\rok\x08\x7f\x9b31m\u202eevil\u2066\nState: succeeded"
RAW = ("\x1b", "\x07", "\r", "\x08", "\x7f", "\x9b", "\u202e", "\u2066")


async def test_labels_that_drive_a_terminal_are_printed_escaped_and_json_stays_exact(live: Live) -> None:
    rem = await live.gated.fire(
        xid_labels("gpu-node-1", 79, uuid="GPU-" + EVIL, pod="trainer-" + EVIL, namespace="ml", summary=EVIL)
    )
    await live.gated.fire({"alertname": "Evil" + EVIL, "node": "node-" + EVIL})  # no rule: stored, listed
    for args in (("get", "alerts"), ("get", "alerts", "-o", "wide"), ("get", "remediations", "-o", "wide"),
                 ("get", "approvals", "-o", "wide"), ("describe", rem.id[:8])):
        result = await live.cli(*args)
        assert result.exit_code == 0, result.output
        assert not any(c in result.stdout for c in RAW), (args, ascii(result.stdout))
        assert SHOWN in result.stdout, (args, result.stdout)
        if args[0] == "get":  # one line per row, every column where its header is
            header, *lines = result.stdout.splitlines()
            assert len(lines) == (2 if args[1] == "alerts" else 1), result.stdout
            for column in ("STATUS", "AGE") if args[1] == "alerts" else ("STATE" if "rem" in args[1] else "STATUS",):
                at = header.index(column)
                assert all(line[at - 1] == " " and line[at] != " " for line in lines), (column, result.stdout)
    described = (await live.cli("describe", rem.id)).stdout
    assert f"  summary={SHOWN}" in described and f"GPU-{SHOWN} (0)" in described
    assert re.findall(r"^State:.*$", described, re.M) == ["State:     awaiting_approval"]
    alerts = await live.cli("get", "alerts", "-o", "json")
    assert not any(c in alerts.stdout for c in RAW), ascii(alerts.stdout)
    rows = json.loads(alerts.stdout)
    assert rows[0]["labels"]["node"] == "node-" + EVIL and rows[1]["labels"]["summary"] == EVIL
    as_yaml = await live.cli("get", "remediations", "-o", "yaml")
    assert not any(c in as_yaml.stdout for c in RAW), ascii(as_yaml.stdout)
    assert yaml.safe_load(as_yaml.stdout)[0]["gpu_uuid"] == "GPU-" + EVIL


async def test_a_config_file_with_a_token_open_to_others_draws_a_warning_naming_the_fix(live: Live) -> None:
    no_env = {"REMEDIATOR_SERVER": None, "REMEDIATOR_TOKEN": None}
    config = live.home / "remediator" / "config.yaml"
    config.parent.mkdir()
    config.write_text(yaml.safe_dump({"server": live.base, "token": TOKEN}))
    for mode in (0o644, 0o640, 0o604, 0o660):
        config.chmod(mode)
        result = await live.cli("get", "remediations", **no_env)
        assert result.exit_code == 0, result.output  # a warning, not a refusal
        assert result.stderr.splitlines() == [
            f"warning: config file {config} holds a token but its permissions {mode:04o} let group or others "
            f"access it; run: chmod 600 {config}"
        ]
    config.chmod(0o600)
    quiet = await live.cli("get", "remediations", **no_env)
    assert quiet.exit_code == 0 and quiet.stderr == ""
    config.write_text(yaml.safe_dump({"server": live.base}))  # no token in it: nothing to protect
    config.chmod(0o644)
    assert (await live.cli("get", "remediations", REMEDIATOR_SERVER=None)).stderr == ""


async def test_scoped_timed_pause_get_pauses_and_resume_by_id(live: Live) -> None:
    made = await live.cli("pause", "--reason", "firmware on rack 7", "--node", "gpu-7", "--node", "gpu-8",
                          "--selector", "rack=7", "--playbook", "reboot-node", "--for", "2h", "--by", "alice")
    assert made.exit_code == 0, made.output
    (row,) = await live.rows("pauses")
    assert row["created_by"] == "api:alice" and row["reason"] == "firmware on rack 7" and row["until"]
    assert row["scope"] == {"all": False, "nodes": ["gpu-7", "gpu-8"], "selector": "rack=7",
                            "playbooks": ["reboot-node"]}
    table = await live.cli("get", "pauses")
    assert table.exit_code == 0 and "node=gpu-7" in table.stdout and "firmware on rack 7" in table.stdout
    assert (await live.gated.rt.repo.get_flag(PAUSE_FLAG) or {}).get("paused") is not True  # not the kill switch
    assert (await live.cli("pause", "--reason", "x", "--for", "2h", "--until", "2030-01-01T00:00:00Z")).exit_code != 0
    assert (await live.cli("pause", "--for", "2h")).exit_code != 0  # a reason is required
    ended = await live.cli("resume", str(row["id"]), "--reason", "done")
    assert ended.exit_code == 0 and "ended" in ended.stdout
    assert await live.rows("pauses") == []
    assert [r["ended_by"] for r in await live.rows("pauses", "--state", "all")] == ["api"]
    assert (await live.cli("resume", "no-such-pause")).exit_code != 0
