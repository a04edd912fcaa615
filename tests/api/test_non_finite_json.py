"""NaN and Infinity in a JSON body get a 422 naming the field on every controller route, never a 500."""

from __future__ import annotations

import pytest

from tests.api.conftest import Controller
from tests.helpers import am_alert, am_payload

JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_a_decision_body_with_a_non_finite_number_is_422(
    controller: Controller, literal: str, decision: str
) -> None:
    response = await controller.client.post(
        f"/api/v1/remediations/missing/{decision}", content=f'{{"by": {literal}}}', headers=JSON
    )
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"].startswith("invalid request: by: ")
    assert body["errors"][0]["field"] == "by"
    assert body["detail"][0]["input"] == literal


@pytest.mark.parametrize("literal", ["NaN", "Infinity"])
async def test_a_webhook_with_a_non_finite_number_is_422_and_stores_nothing(
    controller: Controller, literal: str
) -> None:
    payload = am_payload(am_alert({"alertname": "GPUXidError", "Hostname": "gpu-node-1"}))
    raw = __import__("json").dumps(payload).replace('"truncatedAlerts": 0', f'"truncatedAlerts": {literal}')
    assert literal in raw
    response = await controller.client.post("/api/v1/alerts", content=raw, headers=JSON)
    assert response.status_code == 422, response.text
    assert "truncatedAlerts" in response.json()["error"]
    assert (await controller.client.get("/api/v1/audit")).json() == []
