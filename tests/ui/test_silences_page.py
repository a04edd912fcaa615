"""The /silences page over HTTP: sign-in, CSRF and confirmation are required; bad forms change nothing; the
"Why did nothing happen?" page names the silence that held an alert."""

from __future__ import annotations

import html
from datetime import timedelta
from pathlib import Path

from remediator.api.signin import SESSION_COOKIE
from tests.approvals.harness import TOKEN, gated_controller
from tests.helpers import am_alert, am_payload, xid_labels
from tests.ui.test_sign_in import ALICE_TOKEN, PUBLIC, csrf_of, forged_csrf, login

AUTH = {"Authorization": f"Bearer {TOKEN}"}
FORM = {"action": "create", "matchers": "alertname=GPUXidError\nHostname=gpu-node-1", "duration": "2h",
        "comment": "rack 4"}


async def test_beyond_loopback_nothing_is_created_without_a_session(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, listen_host=PUBLIC, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        r = await gated.client.get("/silences")
        assert r.status_code == 303 and r.headers["location"] == "/login?next=/silences"
        csrf = forged_csrf(gated.client, "ui:silences")
        gated.client.cookies.set(SESSION_COOKIE, f"YWxpY2U.{2**40}.{'s' * 22}.{'0' * 64}")  # a forged session
        r = await gated.client.post("/silences", data={**FORM, "csrf": csrf, "confirmed": "yes"})
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
        assert await gated.rt.repo.list_silences() == []


async def test_the_open_loopback_ui_still_needs_a_person_csrf_and_a_confirmation(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        page = await gated.client.get("/silences")
        assert page.status_code == 200 and 'id="sign-in-needed"' in page.text
        csrf = csrf_of(page.text)
        r = await gated.client.post("/silences", data={**FORM, "csrf": csrf, "confirmed": "yes"})
        assert r.status_code == 403 and "Sign in first" in r.text
        await login(gated, ALICE_TOKEN, "/silences")
        page = await gated.client.get("/silences")
        csrf = csrf_of(page.text)
        r = await gated.client.post("/silences", data={**FORM, "csrf": "0" * 64, "confirmed": "yes"})
        assert r.status_code == 403 and "could not be verified" in r.text
        r = await gated.client.post("/silences", data={**FORM, "csrf": csrf})
        assert r.status_code == 200 and "Create this silence?" in r.text
        shown = html.unescape(r.text)
        assert 'alertname="GPUXidError"' in shown and 'Hostname="gpu-node-1"' in shown
        assert await gated.rt.repo.list_silences() == []
        r = await gated.client.post("/silences", data={**FORM, "csrf": csrf_of(r.text), "confirmed": "yes"})
        assert r.status_code == 303 and r.headers["location"] == "/silences?done=created"
        (silence,) = await gated.rt.repo.list_silences()
        assert silence.actor == "alice" and silence.created_by == "alice" and silence.comment == "rack 4"

        for change, problem in (
            ({"matchers": 'Hostname=~"gpu-node-("'}, "matchers[0].value"),
            ({"matchers": 'Hostname=~".*"'}, "empty string"),
            ({"matchers": 'Hostname="gpu'}, "closing quote"),
            ({"duration": "soon"}, "not a duration"),
            ({"comment": " "}, "comment"),
        ):
            r = await gated.client.post("/silences", data={**FORM, **change, "csrf": csrf, "confirmed": "yes"})
            assert r.status_code == 422 and problem in html.unescape(r.text), (change, r.text)
        assert len(await gated.rt.repo.list_silences()) == 1

        expire = {"action": "expire", "silence": silence.id, "csrf": csrf}
        r = await gated.client.post("/silences", data=expire)
        assert r.status_code == 200 and "Expire this silence?" in r.text
        r = await gated.client.post("/silences", data={**expire, "confirmed": "yes"})
        assert r.status_code == 303
        r = await gated.client.post("/silences", data={**expire, "confirmed": "yes"})
        assert r.status_code == 409
        r = await gated.client.post("/silences", data={**expire, "silence": "nope", "confirmed": "yes"})
        assert r.status_code == 404


async def test_the_unacted_page_names_the_silence(tmp_path: Path) -> None:
    async with gated_controller(tmp_path) as gated:
        body = {"matchers": [{"name": "Hostname", "value": "gpu-node-1", "isRegex": False}],
                "endsAt": (gated.clock.now + timedelta(hours=1)).isoformat(), "comment": "rack 4", "createdBy": "Alice"}
        r = await gated.client.post("/api/v1/silences", json=body, headers=AUTH)
        assert r.status_code == 200, r.text
        sid = r.json()["silenceID"]
        r = await gated.client.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("gpu-node-1", 79))),
                                    headers=AUTH)
        assert r.status_code == 200
        await gated.settle()
        page = await gated.client.get("/alerts/ignored", params={"reason": "silenced"})
        assert page.status_code == 200
        assert 'data-reason="silenced"' in page.text and f'href="/silences#silence-{sid}"' in page.text
        assert "by Alice: rack 4" in page.text
