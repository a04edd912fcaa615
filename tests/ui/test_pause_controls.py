"""Pause and resume from the fleet page over HTTP: a person, the CSRF token and the confirmation are required;
the confirmation says exactly what will happen (scope, end, the remediations in flight it catches); bad forms
change nothing and name the field; the confirmed forms make the same records and audit events as the API, with
the signed-in person as the actor; the banner shows each pause (who, why, scope, until), never 'Paused by api'."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from remediator.api.signin import SESSION_COOKIE
from remediator.store.flag_store import PAUSE_FLAG
from tests.approvals.harness import TOKEN, Gated, gated_controller
from tests.ui.test_sign_in import ALICE_TOKEN, PUBLIC, csrf_of, forged_csrf, login

AUTH = {"Authorization": f"Bearer {TOKEN}"}
FORM = {"scope": "some", "nodes": "gpu-node-1", "selector": "rack=r12", "for": "2h", "reason": "rack r12 firmware"}


def text_of(page: str) -> str:
    """The page as it reads: tags out, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


async def audit_kinds(gated: Gated, kind: str) -> list[Any]:
    return [e for e in await gated.rt.repo.list_audit(limit=10000) if e.kind == kind]


async def test_beyond_loopback_nothing_is_paused_or_resumed_without_a_session(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, listen_host=PUBLIC, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        r = await gated.client.get("/fleet/pause")
        assert r.status_code == 303 and r.headers["location"] == "/login?next=/fleet/pause"
        made = await gated.client.post("/api/v1/pauses", json={"reason": "drill", "nodes": ["gpu-node-2"]},
                                       headers=AUTH)
        assert made.status_code == 201
        csrf = forged_csrf(gated.client, "ui:pauses")
        gated.client.cookies.set(SESSION_COOKIE, f"YWxpY2U.{2**40}.{'s' * 22}.{'0' * 64}")  # a forged session
        r = await gated.client.post("/fleet/pauses", data={**FORM, "csrf": csrf, "confirmed": "yes"})
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
        r = await gated.client.post(f"/fleet/pauses/{made.json()['id']}/resume",
                                    data={"csrf": csrf, "confirmed": "yes"})
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
        assert [p["id"] for p in await gated.rt.repo.list_pauses()] == [made.json()["id"]]


async def test_a_person_pauses_a_scope_through_the_confirmation_and_resumes_it(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        rem = await gated.fire()  # gpu-node-1, gated-drain, awaiting approval: in flight
        form_page = await gated.client.get("/fleet/pause")
        assert form_page.status_code == 200 and 'id="sign-in-needed"' in form_page.text
        assert 'http-equiv="refresh"' not in form_page.text  # nothing typed is lost to a reload
        csrf = csrf_of(form_page.text)
        r = await gated.client.post("/fleet/pauses", data={**FORM, "csrf": csrf})
        assert r.status_code == 403 and "Sign in first" in r.text  # the open loopback UI: still a person
        r = await gated.client.get("/fleet/pauses/kill-switch/resume")
        assert r.status_code == 403
        await login(gated, ALICE_TOKEN, "/fleet/pause")
        csrf = csrf_of((await gated.client.get("/fleet/pause")).text)
        r = await gated.client.post("/fleet/pauses", data={**FORM, "csrf": "0" * 64, "confirmed": "yes"})
        assert r.status_code == 403 and "could not be verified" in r.text

        r = await gated.client.post("/fleet/pauses", data={**FORM, "csrf": csrf})
        assert r.status_code == 200
        shown = html.unescape(r.text)
        assert ("Hold new steps on node gpu-node-1 and on nodes matching rack=r12 for 2h (until "
                in shown), shown
        assert f"gated-drain on gpu-node-1 GPU 0 (awaiting_approval, {rem.id[:8]})" in shown
        assert "as done by alice, with the reason: rack r12 firmware" in shown
        assert await gated.rt.repo.list_pauses() == []  # only the confirmation so far

        r = await gated.client.post("/fleet/pauses", data={**FORM, "csrf": csrf_of(r.text), "confirmed": "yes"})
        assert r.status_code == 303 and r.headers["location"] == "/fleet"
        (pause,) = await gated.rt.repo.list_pauses()
        assert pause["created_by"] == "alice" and pause["reason"] == "rack r12 firmware"
        assert pause["scope"] == {"all": False, "nodes": ["gpu-node-1"], "selector": "rack=r12", "playbooks": []}
        assert pause["until"] is not None
        (created,) = await audit_kinds(gated, "pause.created")
        assert created.actor == "alice" and created.data["id"] == pause["id"]
        api = (await gated.client.get("/api/v1/pauses", headers=AUTH)).json()
        assert [p["id"] for p in api] == [pause["id"]]

        fleet = text_of((await gated.client.get("/fleet")).text)
        assert "Paused on node gpu-node-1 and on nodes matching rack=r12 by alice: rack r12 firmware, until " in fleet
        raw = (await gated.client.get("/fleet")).text
        assert f'href="/fleet/pauses/{pause["id"]}/resume"' in raw and 'id="pause-controls"' in raw
        index = text_of((await gated.client.get("/")).text)
        assert "rack r12 firmware" in index and "Paused by api" not in index

        resume = await gated.client.get(f"/fleet/pauses/{pause['id']}/resume")
        assert resume.status_code == 200
        assert "End the pause on node gpu-node-1 and on nodes matching rack=r12 (by alice: rack r12 firmware" in (
            html.unescape(resume.text))
        r = await gated.client.post(f"/fleet/pauses/{pause['id']}/resume", data={"csrf": csrf_of(resume.text)})
        assert r.status_code == 303 and await gated.rt.repo.list_pauses() != []  # unconfirmed: back to the page
        r = await gated.client.post(f"/fleet/pauses/{pause['id']}/resume",
                                    data={"csrf": csrf_of(resume.text), "confirmed": "yes", "reason": "done"})
        assert r.status_code == 303 and await gated.rt.repo.list_pauses() == []
        (ended,) = await gated.rt.repo.list_pauses(include_ended=True)
        assert ended["ended_by"] == "alice"
        (event,) = await audit_kinds(gated, "pause.ended")
        assert event.actor == "alice" and event.data["resume_reason"] == "done"
        r = await gated.client.post(f"/fleet/pauses/{pause['id']}/resume",
                                    data={"csrf": csrf_of(resume.text), "confirmed": "yes"})
        assert r.status_code == 409  # already ended: nothing more is recorded
        assert len(await audit_kinds(gated, "pause.ended")) == 1


async def test_bad_forms_name_the_field_and_change_nothing(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        await login(gated, ALICE_TOKEN, "/fleet/pause")
        csrf = csrf_of((await gated.client.get("/fleet/pause")).text)
        for change, problem in (
            ({"reason": " "}, "reason"),
            ({"scope": "all"}, "'everything' was chosen"),
            ({"scope": "some", "nodes": "", "selector": ""}, "name the nodes"),
            ({"scope": ""}, "scope: choose"),
            ({"selector": "rack in (a,b)"}, "selector"),
            ({"for": "soon"}, "for:"),
            ({"until": "2030-01-01T00:00"}, "not both"),
            ({"for": "", "until": "2001-01-01T00:00"}, "in the future"),
            ({"playbook": "no-such-playbook"}, "not a loaded playbook"),
        ):
            r = await gated.client.post("/fleet/pauses", data={**FORM, **change, "csrf": csrf, "confirmed": "yes"})
            assert r.status_code == 422 and problem in html.unescape(r.text), (change, r.text)
        assert await gated.rt.repo.list_pauses(include_ended=True) == []


async def test_everything_and_playbooks_read_as_they_hold_and_the_kill_switch_is_lifted_from_the_page(
    tmp_path: Path,
) -> None:
    async with gated_controller(tmp_path, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        await login(gated, ALICE_TOKEN, "/fleet/pause")
        csrf = csrf_of((await gated.client.get("/fleet/pause")).text)
        r = await gated.client.post("/fleet/pauses", data={"scope": "some", "playbook": "gated-drain",
                                                           "until": "2030-01-01T00:00", "reason": "no drains",
                                                           "csrf": csrf})
        assert "Hold new steps of playbook gated-drain on every node until 2030-01-01 00:00 UTC (" in (
            html.unescape(r.text))
        r = await gated.client.post("/fleet/pauses", data={"scope": "all", "reason": "incident", "csrf": csrf})
        assert "Hold new steps everywhere (every node, every playbook) until someone resumes it:" in (
            html.unescape(r.text))
        # The kill switch set through the API without a name: the banner says so in words, and the page lifts it.
        assert (await gated.client.post("/api/v1/pause", json={"reason": "storm"}, headers=AUTH)).status_code == 200
        fleet = text_of((await gated.client.get("/fleet")).text)
        assert "Paused everywhere (kill switch) by an API caller that gave no name: storm" in fleet
        assert "Paused by api" not in fleet
        confirm = await gated.client.get("/fleet/pauses/kill-switch/resume")
        assert "Lift the kill switch (set by an API caller that gave no name: storm) now." in html.unescape(
            confirm.text)
        r = await gated.client.post("/fleet/pauses/kill-switch/resume",
                                    data={"csrf": csrf_of(confirm.text), "confirmed": "yes"})
        assert r.status_code == 303
        assert (await gated.rt.repo.get_flag(PAUSE_FLAG) or {}).get("paused") is False
        (event,) = [e for e in await gated.rt.repo.list_audit(limit=1000) if e.kind == "controller.resumed"]
        assert event.actor == "alice"
        r = await gated.client.post("/fleet/pauses/kill-switch/resume",
                                    data={"csrf": csrf_of(confirm.text), "confirmed": "yes"})
        assert r.status_code == 409


async def test_the_fleet_page_lists_each_pause_once_with_who_why_scope_until_and_resume(tmp_path: Path) -> None:
    """One list beside the banner (no separate 'Paused' card): each pause and the kill switch once, with its
    scope, author, reason, start and end and a Resume link; an unnamed API caller is said in words, never 'api'."""
    async with gated_controller(tmp_path, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        made = await gated.client.post("/api/v1/pauses", headers=AUTH, json={
            "reason": "rack r12 firmware", "selector": "rack=r12", "for": "2h"})
        assert made.status_code == 201, made.text
        pause = made.json()
        assert pause["created_by"] == "api"
        assert (await gated.client.post("/api/v1/pause", json={"reason": "storm"}, headers=AUTH)).status_code == 200
        raw = (await gated.client.get("/fleet")).text
        assert 'id="pauses"' not in raw  # the old card is gone
        body = raw[raw.index("<h1>Fleet</h1>"):]  # the page below the banner
        assert body.count(f'data-pause="{pause["id"]}"') == 1 and body.count('id="pause-all"') == 1
        assert body.count('href="/fleet/pauses/kill-switch/resume"') == 1
        assert body.count(f'href="/fleet/pauses/{pause["id"]}/resume"') == 1
        item = body[body.index(f'data-pause="{pause["id"]}"'):]
        item = text_of(item[item.index(">") + 1:item.index("</li>")])
        assert item.startswith("Paused on nodes matching rack=r12 by an API caller that gave no name since ")
        assert ": rack r12 firmware, until " in item and item.endswith("Resume…")
        kill = body[body.index('id="pause-all"'):]
        kill = text_of(kill[kill.index(">") + 1:kill.index("</li>")])
        assert kill.startswith("Paused everywhere (kill switch) by an API caller that gave no name: storm, until "
                               "someone resumes it.")
        assert not re.search(r">\s*api\s*<", raw) and "paused by api" not in text_of(raw).lower()
