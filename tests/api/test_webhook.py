"""POST /api/v1/alerts: auth, size limit, validation naming the field, durability, repeats."""

from __future__ import annotations

import json

import httpx
import pytest

from remediator.store.repository import Repository
from tests.api.conftest import Controller
from tests.helpers import am_alert, am_payload, xid_labels


async def _counts(repo: Repository) -> tuple[int, int]:
    alerts = await repo.list_alerts()
    return len(alerts), len({a.batch_id for a in alerts})


async def test_valid_webhook_is_stored_before_200(controller: Controller) -> None:
    body = am_payload(am_alert(xid_labels("gpu-1", 79)))
    r = await controller.client.post("/api/v1/alerts", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["alerts"] == 1 and r.json()["repeats"] == 0
    assert await _counts(controller.rt.repo) == (1, 1)


@pytest.mark.parametrize("header", [None, "Bearer wrong", "Basic czNjcmV0", "Bearer "])
async def test_missing_or_bad_token_is_401_and_stores_nothing(controller: Controller, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    async with httpx.AsyncClient(transport=controller.client._transport, base_url="http://127.0.0.1") as anon:
        r = await anon.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("n", 79))), headers=headers)
    assert r.status_code == 401
    assert await _counts(controller.rt.repo) == (0, 0)


async def test_every_configured_token_is_accepted(controller: Controller) -> None:
    r = await controller.client.post(
        "/api/v1/alerts", json=am_payload(am_alert(xid_labels("n", 79))),
        headers={"Authorization": "Bearer second-token"},
    )
    assert r.status_code == 200


async def test_body_over_the_limit_is_413(controller: Controller) -> None:
    labels = xid_labels("n", 79)
    alerts = [am_alert({**labels, "gpu": str(i), "filler": "x" * 4000}) for i in range(20)]
    r = await controller.client.post("/api/v1/alerts", content=json.dumps(am_payload(*alerts)))
    assert r.status_code == 413
    assert await _counts(controller.rt.repo) == (0, 0)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["alerts"][0].pop("fingerprint"), "alerts[0].fingerprint"),
        (lambda b: b.update(version="3"), "version"),
        (lambda b: b["alerts"][0].update(status="burning"), "alerts[0].status"),
        (lambda b: b["alerts"][0].update(startsAt="yesterday"), "alerts[0].startsAt"),
        (lambda b: b["alerts"][0]["labels"].pop("alertname"), "alerts[0].labels"),
        (lambda b: b.update(alerts=[]), "alerts"),
    ],
)
async def test_malformed_payload_is_422_naming_the_field_and_stores_nothing(
    controller: Controller, mutate: object, field: str
) -> None:
    good = am_alert(xid_labels("n", 79))
    body = am_payload(good, am_alert(xid_labels("n", 48, gpu="1")))
    mutate(body)  # type: ignore[operator]
    r = await controller.client.post("/api/v1/alerts", json=body)
    assert r.status_code == 422
    assert field in r.json()["error"]
    assert await _counts(controller.rt.repo) == (0, 0)


async def test_not_json_is_422(controller: Controller) -> None:
    r = await controller.client.post("/api/v1/alerts", content=b"{not json")
    assert r.status_code == 422
    assert await _counts(controller.rt.repo) == (0, 0)


async def test_store_unavailable_is_503(controller: Controller) -> None:
    from remediator.store.db import make_engine, make_sessionmaker
    from remediator.store.intake_writer import IntakeWriter
    from remediator.store.repository import Repository

    broken = make_engine("sqlite+aiosqlite:////nonexistent-dir/x.db")
    rt = controller.rt
    original_repo, original_intake = rt.repo, rt.intake
    rt.repo = Repository(make_sessionmaker(broken))
    rt.intake = IntakeWriter(rt.repo)
    try:
        r = await controller.client.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("n", 79))))
        ready = await controller.client.get("/readyz")
    finally:
        await rt.intake.close()
        await rt.repo.close()
        rt.repo, rt.intake = original_repo, original_intake
        await broken.dispose()
    assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    assert ready.status_code == 503
    assert await _counts(controller.rt.repo) == (0, 0)


async def test_same_payload_twice_starts_one_remediation(controller: Controller) -> None:
    body = am_payload(am_alert(xid_labels("gpu-1", 79)))
    assert (await controller.client.post("/api/v1/alerts", json=body)).status_code == 200
    second = await controller.client.post("/api/v1/alerts", json=body)
    assert second.json()["repeats"] == 1
    await controller.worker.drain_idle()
    rems = (await controller.client.get("/api/v1/remediations")).json()
    assert len(rems) == 1
    audit = (await controller.client.get("/api/v1/audit")).json()
    assert sum(1 for e in audit if e["kind"] == "remediation.created") == 1


async def test_health_says_plan_only_without_cluster(controller: Controller) -> None:
    health = (await controller.client.get("/healthz")).json()
    assert health["plan_only"] is True and "plan-only" in health["mode"]
    assert (await controller.client.get("/readyz")).status_code == 200


async def test_metrics_count_received_alerts(controller: Controller) -> None:
    await controller.client.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("n", 79))))
    text = (await controller.client.get("/metrics")).text
    assert 'remediator_alerts_received_total{status="firing"} 1.0' in text
    assert "remediator_webhook_duration_seconds_bucket" in text
