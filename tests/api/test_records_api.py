"""The read-only listings behind `remediator get`: GET /api/v1/alerts, GET /api/v1/approvals, and
GET /api/v1/remediations?id_prefix= (the short IDs the command line shows)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.approvals.harness import TOKEN, Gated, gated_controller
from tests.helpers import xid_labels

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[Gated]:
    async with gated_controller(tmp_path) as controller:
        yield controller


async def test_listings_need_the_bearer_token(gated: Gated) -> None:
    for path in ("/api/v1/alerts", "/api/v1/approvals"):
        assert (await gated.client.get(path)).status_code == 401
        assert (await gated.client.get(path, headers={"Authorization": "Bearer nope"})).status_code == 401


async def test_approvals_list_pending_then_decided_without_the_token(gated: Gated) -> None:
    rem = await gated.fire()
    rows = (await gated.client.get("/api/v1/approvals", headers=AUTH)).json()
    assert len(rows) == 1
    (row,) = rows
    assert row["remediation_id"] == rem.id and row["status"] == "pending" and row["step_name"] == "drain"
    assert row["node"] == "gpu-node-1" and row["playbook"] == "gated-drain"
    assert row["remediation_state"] == "awaiting_approval"
    assert "token" not in str(row.keys()) and "token_hash" not in row
    r = await gated.client.post(f"/api/v1/remediations/{rem.id}/approve", json={"by": "dana"}, headers=AUTH)
    assert r.status_code == 200, r.text
    (row,) = (await gated.client.get("/api/v1/approvals", headers=AUTH)).json()
    assert row["status"] == "approved" and row["decided_by"] == "api:dana" and row["decision_source"] == "api"
    assert (await gated.client.get("/api/v1/approvals?status=pending", headers=AUTH)).json() == []
    assert len((await gated.client.get("/api/v1/approvals?status=approved", headers=AUTH)).json()) == 1
    assert (await gated.client.get("/api/v1/approvals?node=other-node", headers=AUTH)).json() == []
    assert len((await gated.client.get(f"/api/v1/approvals?remediation={rem.id}", headers=AUTH)).json()) == 1
    assert (await gated.client.get("/api/v1/approvals?remediation=nope", headers=AUTH)).status_code == 422
    assert (await gated.client.get("/api/v1/approvals?status=maybe", headers=AUTH)).status_code == 422


async def test_alerts_list_newest_first_with_filters(gated: Gated) -> None:
    first = await gated.fire(xid_labels("gpu-node-1", 79))
    await gated.fire(xid_labels("gpu-node-2", 13))  # matches no rule: stored, processed, no remediation
    rows = (await gated.client.get("/api/v1/alerts", headers=AUTH)).json()
    assert [r["labels"]["Hostname"] for r in rows] == ["gpu-node-2", "gpu-node-1"]
    assert rows[1]["remediation_id"] == first.id and rows[1]["status"] == "firing" and rows[1]["state"] == "done"
    assert rows[0]["remediation_id"] is None and rows[0]["outcome"]
    by_node = (await gated.client.get("/api/v1/alerts?node=gpu-node-1", headers=AUTH)).json()
    assert [r["id"] for r in by_node] == [rows[1]["id"]]
    assert (await gated.client.get("/api/v1/alerts?node=gpu-node-9", headers=AUTH)).json() == []
    assert (await gated.client.get("/api/v1/alerts?status=resolved", headers=AUTH)).json() == []
    assert (await gated.client.get("/api/v1/alerts?state=new", headers=AUTH)).json() == []
    assert len((await gated.client.get("/api/v1/alerts?limit=1", headers=AUTH)).json()) == 1
    assert (await gated.client.get("/api/v1/alerts?status=burning", headers=AUTH)).status_code == 422


async def test_remediations_by_id_prefix(gated: Gated) -> None:
    rem = await gated.fire()
    found = (await gated.client.get(f"/api/v1/remediations?id_prefix={rem.id[:8].upper()}", headers=AUTH)).json()
    assert [r["id"] for r in found] == [rem.id]
    other = "0" if rem.id[0] != "0" else "1"
    assert (await gated.client.get(f"/api/v1/remediations?id_prefix={other}", headers=AUTH)).json() == []
    for bad in ("%25", "_", "abc%20"):  # a LIKE wildcard or anything else than hex and dashes is refused
        assert (await gated.client.get(f"/api/v1/remediations?id_prefix={bad}", headers=AUTH)).status_code == 422


async def test_the_same_filters_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    async with gated_controller(tmp_path, database_url=pg_url) as gated:
        rem = await gated.fire()
        by_node = (await gated.client.get("/api/v1/alerts?node=gpu-node-1", headers=AUTH)).json()
        assert [r["remediation_id"] for r in by_node] == [rem.id]
        assert (await gated.client.get("/api/v1/alerts?node=gpu-node-9", headers=AUTH)).json() == []
        (row,) = (await gated.client.get("/api/v1/approvals?status=pending&node=gpu-node-1", headers=AUTH)).json()
        assert row["remediation_id"] == rem.id
        found = (await gated.client.get(f"/api/v1/remediations?id_prefix={rem.id[:5]}", headers=AUTH)).json()
        assert [r["id"] for r in found] == [rem.id]
