"""Navigation, the planned state, per-remediation facts and links (list rows and detail), the fleet view,
"why did nothing happen?", approval previews of steps that need an earlier step's output, API timestamps and
JSON logs."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from remediator.api.templating import age
from remediator.api.ui_facts import list_facts
from remediator.process.logs import ContextFilter, JsonFormatter, configure_logging, log_context
from remediator.store.read_store import RemediationSummary
from tests.approvals.harness import TOKEN, Gated, gated_controller
from tests.helpers import am_alert, am_payload, xid_labels
from tests.ui.views_defs import hot_labels, views_defs

AUTH = {"Authorization": f"Bearer {TOKEN}"}
OFFSET = re.compile(r"(\+00:00|Z)$")


@pytest.fixture
async def views(tmp_path: Path) -> AsyncIterator[Gated]:
    async with gated_controller(
        tmp_path, **views_defs(tmp_path), alertmanager_url="http://alertmanager.example:9093",
        grafana_url="https://grafana.example", grafana_dashboard="/d/gpu/node?orgId=1",
    ) as controller:
        yield controller


async def post(g: Gated, labels: dict[str, str], starts_at: str = "2026-12-02T10:00:00Z") -> None:
    r = await g.client.post("/api/v1/alerts", json=am_payload(am_alert(labels, starts_at=starts_at)), headers=AUTH)
    assert r.status_code == 200, r.text
    await g.settle()


def nav_links(html: str) -> list[tuple[str, bool]]:
    nav = html[html.index('<nav aria-label="Main">'):html.index("</nav>")]
    return [(m.group(1), bool(m.group(2))) for m in re.finditer(r'<a href="([^"]+)"( aria-current="page")?>', nav)]


async def test_navigation_is_a_list_of_links_with_the_current_page_marked(views: Gated) -> None:
    for path in ("/", "/fleet", "/alerts/ignored", "/storms", "/definitions", "/reports/idle"):
        page = await views.client.get(path)
        assert page.status_code == 200, path
        links = nav_links(page.text)
        assert [h for h, _ in links][:3] == ["/", "/fleet", "/alerts/ignored"]
        assert [h for h, current in links if current] == [path], path
        assert page.text.count("<li><a href=") >= 5


async def test_plan_only_remediation_reads_planned_in_list_and_detail(views: Gated) -> None:
    rem = await views.fire()
    ok = await views.client.post(f"/api/v1/remediations/{rem.id}/approve", headers=AUTH, json={})
    assert ok.status_code == 200, ok.text
    await views.settle()
    assert await views.state(rem.id) == "planned"  # its own stored state; the pages read the same name
    listing = (await views.client.get("/")).text
    row = listing[listing.index(f"/remediations/{rem.id}") - 200:listing.index(f"/remediations/{rem.id}")]
    assert 'data-state="planned"' in row and ">planned</span>" in row and "succeeded" not in row
    detail = (await views.client.get(f"/remediations/{rem.id}")).text
    assert re.search(r'id="state">planned<', detail) and 'id="planned-note"' in detail
    assert ">succeeded</span>" not in detail


async def test_detail_shows_severity_age_xid_and_links(views: Gated) -> None:
    rem = await views.fire(xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml", severity="critical"))
    html = (await views.client.get(f"/remediations/{rem.id}")).text
    assert 'id="severity">critical<' in html
    xid = html[html.index('id="xid"'):]
    assert "79" in xid[:200] and "fallen off the bus" in xid[:400].lower() and "RESTART_BM" in xid[:600]
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00">[^<]+UTC\+00:00</time>', html)
    assert re.search(r'class="age">\((just now|\d+ min ago)\)', html)
    assert 'href="http://prometheus:9090/graph" id="graph-link"' in html  # the alert's generatorURL
    silence = re.search(r'href="([^"]+)" id="silence-link"', html)
    assert silence is not None
    url = silence.group(1).replace("&amp;", "&")
    assert url.startswith("http://alertmanager.example:9093/#/silences/new?filter=")
    assert unquote(url.split("filter=", 1)[1]) == '{alertname="GPUXidError",Hostname="gpu-node-1"}'
    grafana = re.search(r'href="([^"]+)" id="grafana-link"', html)
    assert grafana is not None
    parts = urlsplit(grafana.group(1).replace("&amp;", "&"))
    assert parts.netloc == "grafana.example" and parts.path == "/d/gpu/node"
    assert parse_qs(parts.query) == {"orgId": ["1"], "var-node": ["gpu-node-1"], "var-gpu": ["0"]}
    # The timeline names the step and the actor of each step event.
    assert re.search(r'<strong>step\.\w+</strong> <span class="step-ref">step 0 &#34;mark&#34;</span> by '
                     r'<span class="actor">controller</span>', html)


async def test_links_are_left_out_without_their_settings(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, **views_defs(tmp_path)) as g:
        rem = await g.fire()
        html = (await g.client.get(f"/remediations/{rem.id}")).text
        assert 'id="graph-link"' in html
        assert 'id="silence-link"' not in html and 'id="grafana-link"' not in html


async def test_fleet_counts_and_breaker_headroom(views: Gated) -> None:
    await views.fire()  # awaiting approval on gpu-node-1
    await post(views, hot_labels("gpu-node-7"))  # awaiting approval on gpu-node-7
    rems = await views.rt.repo.list_remediations()
    assert len(rems) == 2
    hot = next(r for r in rems if r.node == "gpu-node-7")
    approved = await views.client.post(f"/api/v1/remediations/{hot.id}/approve", headers=AUTH, json={})
    assert approved.status_code == 200
    await views.settle()
    page = await views.client.get("/fleet")
    html = page.text
    # The drain waiting on gpu-node-1 already counts against the breaker (admitted, quarantining), but in
    # plan-only mode without a cluster nothing is tainted: the node is counted, not shown quarantined. The
    # finished plan-only run on gpu-node-7 changed nothing and holds no quarantine. No inventory: the fleet's
    # size is not known and the page says so.
    assert re.search(r'id="quarantines-allowed">9 more quarantines allowed<', html)
    assert "the number of GPU nodes is not known" in html
    assert re.search(r'id="count-awaiting"><span class="n">1<', html)
    assert re.search(r'id="count-recent"><span class="n">2<', html)
    assert re.search(r'id="count-quarantined"><span class="n">0<', html)
    assert 'data-node="gpu-node-1"' in html and 'data-node="gpu-node-7"' in html
    api = (await views.client.get("/api/v1/fleet", headers=AUTH)).json()
    assert api["counts"]["awaiting_approval"] == 1 and api["counts"]["recent"] == 2
    assert api["headroom"] == {**api["headroom"], "allowed": 9, "limit": 10, "quarantined": 1}
    flags = {n["node"]: n["flags"] for n in api["nodes"]}
    assert flags == {"gpu-node-1": ["counted by the breaker", "awaiting approval", "recently remediated"],
                     "gpu-node-7": ["recently remediated"]}
    assert (await views.client.get("/api/v1/fleet")).status_code == 401


async def test_why_nothing_happened_lists_cooldown_with_end_time_and_other_reasons(views: Gated) -> None:
    await post(views, hot_labels())
    (rem,) = await views.rt.repo.list_remediations()
    await views.client.post(f"/api/v1/remediations/{rem.id}/approve", headers=AUTH, json={})
    await views.settle()
    finished = (await views.rt.repo.get(rem.id))
    assert finished is not None and finished.finished_at is not None
    await post(views, hot_labels(), starts_at="2026-12-02T11:00:00Z")  # same GPU again, inside the cooldown
    await post(views, {"alertname": "SomethingElse", "Hostname": "gpu-node-2"})  # no rule
    await post(views, {**hot_labels(), "Hostname": "Not_A_Node!"}, starts_at="2026-12-02T12:00:00Z")  # no target

    items = (await views.client.get("/api/v1/alerts/unacted", headers=AUTH)).json()
    by_reason = {i["reason"]: i for i in items}
    assert set(by_reason) == {"cooldown", "unmatched", "no_target"}
    cooldown = by_reason["cooldown"]
    end = finished.finished_at.replace(tzinfo=UTC) + timedelta(hours=1)  # SQLite gives it back naive
    assert datetime.fromisoformat(cooldown["until"]) == end and OFFSET.search(cooldown["until"])
    assert cooldown["remediation_id"] == rem.id and cooldown["node"] == "gpu-node-7"
    assert by_reason["no_target"]["detail"].startswith("label Hostname:")
    assert cooldown["simulate"] == f"remediator simulate alert-{cooldown['alert_id']}.json"
    only = (await views.client.get("/api/v1/alerts/unacted?reason=unmatched", headers=AUTH)).json()
    assert [i["reason"] for i in only] == ["unmatched"]
    assert (await views.client.get("/api/v1/alerts/unacted?reason=bogus", headers=AUTH)).status_code == 422

    html = (await views.client.get("/alerts/ignored")).text
    row = html[html.index('data-reason="cooldown"'):]
    row = row[:row.index("</tr>")]
    assert "cooldown ends" in row and end.strftime("%Y-%m-%d %H:%M:%S") + " UTC+00:00" in row
    assert f'href="/remediations/{rem.id}"' in row and "remediator simulate alert-" in row

    payload = await views.client.get(f"/alerts/{cooldown['alert_id']}/payload.json")
    assert payload.status_code == 200 and "attachment" in payload.headers["content-disposition"]
    body = payload.json()
    assert body["version"] == "4" and body["alerts"][0]["labels"] == hot_labels()
    assert body["alerts"][0]["startsAt"].startswith("2026-12-02T11:00:00")
    from remediator.intake.models import AlertmanagerPayload

    AlertmanagerPayload.model_validate(body)  # what `remediator simulate` reads


async def test_held_by_pause_is_listed_as_paused(views: Gated) -> None:
    assert (await views.client.post("/api/v1/pause", headers=AUTH, json={"reason": "test"})).status_code == 200
    await post(views, hot_labels())
    items = (await views.client.get("/api/v1/alerts/unacted", headers=AUTH)).json()
    assert [i["reason"] for i in items] == ["paused"] and items[0]["remediation_state"] == "held"


async def test_approval_preview_says_when_parameters_depend_on_an_earlier_step(views: Gated) -> None:
    await post(views, {"alertname": "GPUDeferredParams", "Hostname": "gpu-node-3"})
    link = await views.link()
    html = (await views.client.get(link)).text
    assert "template error" not in html and "UndefinedError" not in html
    assert "decided after step `scale` runs" in html
    (rem,) = await views.rt.repo.list_remediations()
    assert "decided after step `scale` runs" in (await views.client.get(f"/remediations/{rem.id}")).text


async def test_api_timestamps_carry_their_offset(views: Gated) -> None:
    rem = await views.fire()
    listed = (await views.client.get("/api/v1/remediations", headers=AUTH)).json()
    detail = (await views.client.get(f"/api/v1/remediations/{rem.id}", headers=AUTH)).json()
    audit = (await views.client.get("/api/v1/audit", headers=AUTH)).json()
    stamps = [listed[0]["created_at"], listed[0]["updated_at"], detail["created_at"], *(e["ts"] for e in audit)]
    stamps += [s["started_at"] for s in detail["steps"] if s["started_at"]]
    assert len(stamps) > 4
    for stamp in stamps:
        assert OFFSET.search(stamp), stamp


def test_json_logs_carry_the_remediation_fields_and_quiet_third_party_info() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("INFO", "json", stream=stream)
        with log_context(remediation="r-1", node="gpu-node-1", gpu="GPU-abc", rule="xid-fatal"):
            logging.getLogger("remediator.engine.executor").info("step %s done", "drain")
        logging.getLogger("remediator.worker").warning("plain")
        logging.getLogger("alembic.runtime.migration").info("Running upgrade -> 0001")
        logging.getLogger("httpx").info("HTTP Request: GET http://x")
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 2
    first, second = lines
    assert first["message"] == "step drain done" and first["level"] == "INFO"
    assert first["logger"] == "remediator.engine.executor"
    assert (first["remediation"], first["node"], first["gpu"], first["rule"]) == (
        "r-1", "gpu-node-1", "GPU-abc", "xid-fatal")
    assert OFFSET.search(first["ts"])
    assert "remediation" not in second and second["message"] == "plain"


def test_age_reads_like_a_person_would_say_it() -> None:
    now = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    assert age(now - timedelta(minutes=12), now) == "12 min ago"
    assert age(now - timedelta(seconds=5), now) == "just now"
    assert age(now - timedelta(hours=3, minutes=5), now) == "3 h 5 min ago"
    assert age(now + timedelta(minutes=30), now) == "in 30 min"
    assert age(now - timedelta(days=3), now) == "3 days ago"


async def test_lines_logged_while_driving_a_remediation_name_it(views: Gated) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("remediator.engine.approvals")
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        rem = await views.fire()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    waits = [line for line in lines if "waits for approval" in line["message"]]
    assert waits, lines
    assert {k: waits[0].get(k) for k in ("remediation", "node", "gpu", "rule")} == {
        "remediation": rem.id, "node": "gpu-node-1", "gpu": rem.gpu_uuid, "rule": "xid-fatal-gated"}


async def test_list_rows_show_the_xid_and_severity(views: Gated) -> None:
    rem = await views.fire(xid_labels("gpu-node-1", 79, severity="critical"))
    listing = (await views.client.get("/")).text
    start = listing.index(f"/remediations/{rem.id}")
    row = listing[start:listing.index("</tr>", start)]
    assert "GPUXidError (Xid 79)" in row and '<span class="badge sev-critical">critical</span>' in row
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00">[^<]+UTC\+00:00</time> '
                     r'<span class="age">\((just now|\d+ min ago)\)</span>', row)


def test_list_facts_take_the_plans_xid_else_the_alerts_label() -> None:
    def line(plan_xid: Any, labels: dict[str, str]) -> RemediationSummary:
        return RemediationSummary(
            id="r", created_at=datetime(2026, 12, 1, tzinfo=UTC), state="failed", state_reason=None, playbook="p",
            target_key="n/gpu0", node="n", namespace=None, gpu_index="0", gpu_uuid=None, alertname="GPUXidError",
            alert_labels=labels, plan_xid=plan_xid,
        )

    catalog = {"code": 48, "description": "double-bit ECC error", "resolution": "RESET_GPU"}
    assert list_facts(line(catalog, {"xid": "79", "severity": "critical"})) == {"severity": "critical", "xid": catalog}
    assert list_facts(line(None, {"xid": "79"}))["xid"] == {"code": "79", "description": None, "resolution": None}
    assert list_facts(line({"code": None}, {"xid": "13"}))["xid"]["code"] == "13"
    assert list_facts(line(None, {})) == {"severity": None, "xid": None}
