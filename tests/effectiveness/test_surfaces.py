"""The effectiveness report through the API, the UI page and the CLI, over remediations stored in SQLite."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.idle_report import read_remediation_facts
from remediator.engine.runtime import Runtime
from remediator.settings import Settings
from remediator.store.models import Remediation
from remediator.store.repository import Repository
from tests.cli.test_cli import run

NOW = datetime.now(UTC).replace(microsecond=0)
H = timedelta(hours=1)
TOKEN = "effectiveness-token"
LADDER = ["reset-gpu", "reboot-node", "rma-gpu"]


def remediation(
    rem_id: str, created: timedelta, finished: timedelta | None, *, state: str = "succeeded",
    playbook: str = "reset-gpu", gpu: str | None = "GPU-a", xid: int | None = 79,
    escalation: dict[str, Any] | None = None,
) -> Remediation:
    """A stored remediation `created` and `finished` that long before NOW."""
    at = NOW - created
    plan: dict[str, Any] = {
        "playbook": {"name": playbook, "steps": []},
        "alert": {"starts_at": (at - 10 * timedelta(minutes=1)).isoformat(), "model": "NVIDIA H200"},
        "xid": {"code": xid},
    }
    if escalation is not None:
        plan["escalation"] = escalation
    return Remediation(
        id=rem_id, created_at=at, updated_at=at, finished_at=None if finished is None else NOW - finished,
        state=state, state_reason=None, rule="xid", playbook=playbook, definitions_version="v1",
        target_kind="gpu", target_key=f"gpu:node-1/{gpu}", node="node-1", gpu_uuid=gpu, gpu_index="0",
        namespace=None, pod=None, alert_id=None, alert_fingerprint="f" * 16, alertname="GPUXidError",
        alert_labels={"Hostname": "node-1"}, alert_annotations={}, alert_resolved=False, params={}, plan=plan,
        context={}, current_step=0, active_key=None, quarantined=False, linked_alerts=0,
    )


def history() -> list[Remediation]:
    """Fresh rows each time: an ORM object once stored belongs to that database."""
    return [
        # GPU-a: reset at -100 h, back 10 min later; faulted again 2 h later (a recurrence), reset again: healed.
        remediation("a1", 100 * H, 100 * H - 10 * timedelta(minutes=1)),
        remediation("a2", 98 * H, 97 * H),
        # GPU-b: reset failed its gate at -50 h and was escalated to a reboot that is still running.
        remediation("b1", 50 * H, 50 * H, state="failed", gpu="GPU-b", xid=48),
        remediation("b2", 50 * H - timedelta(minutes=1), None, state="running", playbook="reboot-node", gpu="GPU-b",
                    xid=48, escalation={"from": "b1", "reason": "gate_failed", "rung": 2, "ladder": LADDER,
                                        "recurrence_seconds": None, "history": [], "gate": None}),
        # Older than the default `since` of 30 days: left out.
        remediation("old", 40 * 24 * H, 40 * 24 * H - H, gpu="GPU-c"),
    ]


async def store(repo: Repository, rows: list[Remediation]) -> None:
    async with repo.transaction() as session:
        session.add_all(rows)


@dataclass
class Served:
    rt: Runtime
    client: httpx.AsyncClient
    url: str


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'e.db'}"
    settings = Settings(database_url=url, webhook_token=[TOKEN], secret_key="k", dry_run=True)
    rt, engine = await build_runtime(settings, connect_kube=False)
    rt.repo.clock = lambda: NOW
    await store(rt.repo, history())
    app = create_app(settings, runtime=rt, run_worker=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        yield Served(rt, client, url)
    await engine.dispose()


async def test_the_store_is_read_in_pages_oldest_first(served: Served) -> None:
    many = [remediation(f"p{i:04d}", timedelta(seconds=10_000 - i), None, state="running", gpu=f"GPU-{i}")
            for i in range(2_500)]
    await store(served.rt.repo, many)
    facts = await read_remediation_facts(served.rt.repo, NOW - 30 * 24 * H)
    ids = [f.id for f in facts]
    assert len(ids) == 2_500 + 4 and len(set(ids)) == len(ids)
    assert ids[:3] == ["a1", "a2", "b1"] and ids[-1] == "p2499"
    page = await served.rt.repo.remediations_since(None, limit=2)
    assert [r.id for r in page] == ["old", "a1"]


async def test_api_reports_outcomes_and_names_a_bad_duration(served: Served) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert (await served.client.get("/api/v1/reports/effectiveness")).status_code == 401
    body = (await served.client.get("/api/v1/reports/effectiveness", headers=auth)).json()
    totals = body["totals"]
    counts = [totals[k] for k in ("runs", "healed", "recurred", "escalated", "open")]
    assert counts == [4, 1, 1, 1, 1]
    assert totals["healed_pct"] == pytest.approx(33.33) and totals["recurrence_pct"] == pytest.approx(33.33)
    # Returned: a1 after 20 min from its alert's start, a2 after 70 min.
    assert totals["mttr_p50_seconds"] == pytest.approx(45 * 60)
    playbooks = {p["key"]: p for p in body["by_playbook"]}
    assert playbooks["reset-gpu"]["runs"] == 3 and playbooks["reboot-node"]["open"] == 1
    assert {x["key"]: x["runs"] for x in body["by_xid"]} == {"79": 2, "48": 2}
    [rec] = body["recurrences"]
    assert (rec["remediation_id"], rec["recurred_by"], rec["time_to_recurrence_seconds"]) == ("a1", "a2", 6600.0)
    assert body["rungs"]["rung_2"] == 1 and body["rungs"]["subjects_rung_2"][0]["subject"] == "GPU-b"

    wider = await served.client.get("/api/v1/reports/effectiveness", params={"since": "60d", "window": "1h"},
                                    headers=auth)
    assert wider.json()["totals"]["runs"] == 5 and wider.json()["totals"]["recurred"] == 0

    for name, value in (("window", "a day"), ("since", "0s")):
        bad = await served.client.get("/api/v1/reports/effectiveness", params={name: value}, headers=auth)
        assert bad.status_code == 422
        assert bad.json()["errors"][0]["field"] == f"query.{name}"


async def test_the_page_shows_the_numbers(served: Served) -> None:
    page = await served.client.get("/reports/effectiveness")
    assert page.status_code == 200
    text = page.text
    assert 'href="/reports/effectiveness"' in text
    assert 'id="total-runs">4<' in text and 'id="total-recurred">1<' in text
    assert 'id="total-mttr-p50">45m<' in text
    assert 'id="rung-2">1<' in text and 'data-subject="GPU-b"' in text
    assert 'data-remediation="a1"' in text and "1h50m" in text  # the recurrence, 110 min after a1 returned
    row = text.split('data-key="reset-gpu"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="runs">3</td>' in row and '<td class="escalated">1</td>' in row
    bad = await served.client.get("/reports/effectiveness", params={"window": "soon"})
    assert bad.status_code == 422 and 'id="report-error"' in bad.text and "window" in bad.text


async def test_the_command_line_prints_json_tables_and_the_ladder(served: Served) -> None:
    result = run("report", "effectiveness", "--db", served.url, "-o", "json", "--ladder", "reset-gpu,rma-gpu")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["totals"]["runs"] == 4 and body["totals"]["escalated"] == 1
    ladder = {p["playbook"]: (p["as_run"], p["edited"]) for p in body["ladder"]["playbooks"]}
    # a2 came 110 min after a1 returned, and b2 after b1's failed gate: both climb to RMA.
    assert ladder == {"reset-gpu": (3, 2), "rma-gpu": (0, 2), "reboot-node": (1, 0)}
    assert body["ladder"]["subjects_at_last_rung_edited"] == 2

    table = run("report", "effectiveness", "--db", served.url, "--window", "7d", "--since", "60d")
    assert table.returncode == 0, table.stderr
    assert "effectiveness of 5 remediation(s)" in table.stdout and "reset-gpu" in table.stdout
    assert "on rung 2 now: 1" in table.stdout

    bad = run("report", "effectiveness", "--db", served.url, "--window", "soon")
    assert bad.returncode == 2 and "--window" in bad.stderr
    bad = run("report", "effectiveness", "--db", served.url, "--ladder", "a,a")
    assert bad.returncode == 2 and "--ladder" in bad.stderr


async def test_replay_shows_the_edited_ladder(served: Served, tmp_path: Path) -> None:
    env = {"REMEDIATOR_DATABASE_URL": served.url}
    result = run("replay", "--since", "30d", "--ladder", "reset-gpu,rma-gpu", env=env)
    assert result.returncode == 0, result.stderr
    assert "ladder reset-gpu -> rma-gpu" in result.stdout
    assert "subjects reaching the last rung (rma-gpu): 0 as run, 2 with the edited ladder" in result.stdout
    as_json = run("replay", "--since", "30d", "--ladder", "reset-gpu,rma-gpu", "--json", env=env)
    assert json.loads(as_json.stdout)["ladder"]["moved"] == 2


async def test_a_failed_run_is_failed_not_open_in_the_api_the_page_and_the_cli(served: Served) -> None:
    """A run that ended failed (a step or its return gate failed, nothing took over) never returns by itself:
    it is counted failed, among the decided runs, and no longer as open."""
    await store(served.rt.repo, [
        remediation("f1", 5 * H, 5 * H - timedelta(minutes=3), state="failed", playbook="reboot-node", gpu="GPU-f"),
    ])
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = (await served.client.get("/api/v1/reports/effectiveness", headers=auth)).json()
    totals = body["totals"]
    assert [totals[k] for k in ("runs", "healed", "recurred", "escalated", "failed", "open")] == [5, 1, 1, 1, 1, 1]
    assert totals["decided"] == 4 and totals["healed_pct"] == pytest.approx(25.0)
    reboot = {p["key"]: p for p in body["by_playbook"]}["reboot-node"]
    assert (reboot["runs"], reboot["failed"], reboot["open"]) == (2, 1, 1)  # b2 still runs: open

    page = (await served.client.get("/reports/effectiveness")).text
    assert 'id="total-failed">1<' in page and 'id="total-open">1<' in page
    row = page.split('data-key="reboot-node"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="failed">1</td>' in row and '<td class="open">1</td>' in row

    cli = run("report", "effectiveness", "--db", served.url, "-o", "json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["totals"]["failed"] == 1 and json.loads(cli.stdout)["totals"]["open"] == 1
    table = run("report", "effectiveness", "--db", served.url)
    assert table.returncode == 0, table.stderr
    assert "escalated 1, failed 1, open 1;" in table.stdout
