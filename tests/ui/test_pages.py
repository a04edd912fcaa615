"""Server-rendered UI: list with filters and refresh, detail with timeline, escaping, decisions, banner."""

from __future__ import annotations

import re

from tests.approvals.harness import TOKEN, Gated
from tests.helpers import xid_labels

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match
    return match.group(1)


async def test_list_filters_and_refreshes(gated: Gated) -> None:
    rem = await gated.fire()
    page = await gated.client.get("/")
    assert page.status_code == 200
    assert 'http-equiv="refresh"' in page.text and 'name="viewport"' in page.text
    assert f"/remediations/{rem.id}" in page.text and "awaiting_approval" in page.text
    assert "Plan-only mode" in page.text
    assert f"/remediations/{rem.id}" in (await gated.client.get("/?state=awaiting_approval")).text
    assert f"/remediations/{rem.id}" not in (await gated.client.get("/?state=succeeded")).text
    assert f"/remediations/{rem.id}" not in (await gated.client.get("/?node=other-node")).text
    assert f"/remediations/{rem.id}" in (await gated.client.get("/?node=gpu-node-1&refresh=0")).text
    assert 'http-equiv="refresh"' not in (await gated.client.get("/?refresh=0")).text
    assert (await gated.client.get("/?state=bogus")).status_code == 200
    assert (await gated.client.get("/static/style.css")).status_code == 200


async def test_detail_shows_timeline_steps_pods_labels_and_escapes(gated: Gated) -> None:
    rem = await gated.fire(
        xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml", team="<script>alert(1)</script>")
    )
    page = await gated.client.get(f"/remediations/{rem.id}")
    assert page.status_code == 200
    text = page.text
    for expected in (
        "remediation.created",
        "state.awaiting_approval",
        "approval.requested",
        "trainer-0",
        "needs approval",
        "Waiting for approval of",
        "xid",
        "Approve",
        "Reject",
    ):
        assert expected in text, expected
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


async def test_banner_shows_pause_and_unknown_remediation_is_a_404_page(gated: Gated) -> None:
    assert (await gated.client.post("/api/v1/pause", headers=AUTH, json={"reason": "test"})).status_code == 200
    assert "Paused" in (await gated.client.get("/")).text
    missing = await gated.client.get("/remediations/does-not-exist")
    assert missing.status_code == 404 and "There is no remediation" in missing.text
