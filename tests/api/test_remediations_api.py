"""The remediation API: listing filters, detail, 404s, cancel and illegal moves, audit filtering, pause."""

from __future__ import annotations

from tests.api.conftest import Controller
from tests.helpers import am_alert, am_payload, xid_labels


async def _one_pending(controller: Controller) -> str:
    await controller.client.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("gpu-1", 79))))
    await controller.worker.process_alerts()
    rems = (await controller.client.get("/api/v1/remediations")).json()
    assert [r["state"] for r in rems] == ["pending"]
    rem_id: str = rems[0]["id"]
    return rem_id


async def test_unknown_remediation_is_404(controller: Controller) -> None:
    assert (await controller.client.get("/api/v1/remediations/nope")).status_code == 404
    cancel = await controller.client.post("/api/v1/remediations/nope/cancel", json={"reason": "test"})
    assert cancel.status_code == 404


async def test_unknown_state_filter_is_422(controller: Controller) -> None:
    r = await controller.client.get("/api/v1/remediations?state=exploded")
    assert r.status_code == 422 and "exploded" in r.text


async def test_filters_by_state_and_node(controller: Controller) -> None:
    await _one_pending(controller)
    assert len((await controller.client.get("/api/v1/remediations?node=gpu-1")).json()) == 1
    assert (await controller.client.get("/api/v1/remediations?node=gpu-2")).json() == []
    assert (await controller.client.get("/api/v1/remediations?state=running")).json() == []


async def test_cancel_then_cancel_again_is_409(controller: Controller) -> None:
    rem_id = await _one_pending(controller)
    r = await controller.client.post(f"/api/v1/remediations/{rem_id}/cancel", json={"reason": "test"})
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    again = await controller.client.post(f"/api/v1/remediations/{rem_id}/cancel", json={"reason": "test"})
    assert again.status_code == 409
    audit = (await controller.client.get(f"/api/v1/audit?remediation={rem_id}")).json()
    cancel = [e for e in audit if e["kind"] == "state.cancelled"]
    assert cancel and cancel[0]["actor"] == "api"


async def test_api_requires_the_token(controller: Controller) -> None:
    r = await controller.client.get("/api/v1/remediations", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401


async def test_pause_holds_new_remediations_and_resume_releases_them(controller: Controller) -> None:
    assert (await controller.client.post("/api/v1/pause", json={"reason": "test"})).json() == {"paused": True}
    rem_id = await _one_pending(controller)
    await controller.worker.drain_idle()
    detail = (await controller.client.get(f"/api/v1/remediations/{rem_id}")).json()
    assert detail["state"] == "held" and "paused" in detail["state_reason"]
    status = (await controller.client.get("/api/v1/guardrails")).json()
    assert status["paused"] is True and status["held"][0]["id"] == rem_id
    await controller.client.post("/api/v1/resume")
    await controller.worker.drain_idle()
    detail = (await controller.client.get(f"/api/v1/remediations/{rem_id}")).json()
    assert detail["state"] == "planned"  # plan-only: nothing was changed
    kinds = [e["kind"] for e in (await controller.client.get("/api/v1/audit")).json()]
    assert "controller.paused" in kinds and "controller.resumed" in kinds
