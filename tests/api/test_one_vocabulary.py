"""One vocabulary of states through the real API: a plan-only run is `planned` in the list, the detail, the
`?state=` filter and the metrics; every list endpoint refuses a filter it does not know (422 naming it) instead
of answering everything; `?gpu=`, the audit log's `?node=` and `?remediation=<prefix>` filter; a refused move
(409) names the state and what it allows; an operator's cancel is not an "error" in "Why did nothing happen?"."""

from __future__ import annotations

from tests.api.conftest import Controller
from tests.helpers import am_alert, am_payload, xid_labels

LISTS = (
    "/api/v1/remediations", "/api/v1/audit", "/api/v1/alerts", "/api/v1/approvals", "/api/v1/fleet",
    "/api/v1/alerts/unacted", "/api/v1/reports/idle", "/api/v1/reports/effectiveness",
)


def _uuid(n: int) -> str:
    return f"GPU-8e6a1c2d-0000-4000-8000-{n:012d}"


async def _fire(controller: Controller, *nodes: int) -> list[dict[str, object]]:
    alerts = [am_alert(xid_labels(f"gpu-{n}", 79, uuid=_uuid(n))) for n in nodes]
    assert (await controller.client.post("/api/v1/alerts", json=am_payload(*alerts))).status_code == 200
    await controller.worker.process_alerts()
    rems: list[dict[str, object]] = (await controller.client.get("/api/v1/remediations?limit=1000")).json()
    return rems


async def test_a_plan_only_run_is_planned_in_the_list_detail_filter_and_metrics(controller: Controller) -> None:
    (rem,) = await _fire(controller, 1)
    await controller.worker.drain_idle()
    listed = (await controller.client.get("/api/v1/remediations")).json()
    assert [r["state"] for r in listed] == ["planned"]
    assert (await controller.client.get(f"/api/v1/remediations/{rem['id']}")).json()["state"] == "planned"
    assert [r["id"] for r in (await controller.client.get("/api/v1/remediations?state=planned")).json()] == [rem["id"]]
    assert (await controller.client.get("/api/v1/remediations?state=succeeded")).json() == []
    metrics = (await controller.client.get("/metrics")).text
    assert 'outcome="planned"' in metrics and 'outcome="succeeded"' not in metrics
    kinds = [e["kind"] for e in (await controller.client.get(f"/api/v1/audit?remediation={rem['id']}")).json()]
    assert "state.planned" in kinds and "state.succeeded" not in kinds


async def test_every_list_endpoint_refuses_an_unknown_query_parameter_naming_it(controller: Controller) -> None:
    for path in LISTS:
        r = await controller.client.get(f"{path}?gpu_uuid=GPU-1")
        assert r.status_code == 422, (path, r.text)
        assert "gpu_uuid" in r.text, (path, r.text)
    bad = await controller.client.get("/api/v1/remediations?state=exploded")
    assert bad.status_code == 422 and "exploded" in bad.text and "planned" in bad.text
    assert (await controller.client.get("/api/v1/approvals?status=open")).status_code == 422


async def test_gpu_node_and_remediation_prefix_filters(controller: Controller) -> None:
    rems = await _fire(controller, *range(1, 18))  # 17 IDs: two of them share a first hex digit
    by_node = {r["node"]: r for r in rems}
    one = by_node["gpu-1"]
    gpu = await controller.client.get(f"/api/v1/remediations?gpu={_uuid(1)}")
    assert [r["id"] for r in gpu.json()] == [one["id"]]
    assert (await controller.client.get("/api/v1/remediations?gpu=GPU-none")).json() == []

    on_node = (await controller.client.get("/api/v1/audit?node=gpu-1")).json()
    assert on_node and {e["remediation_id"] for e in on_node} == {one["id"]}
    prefix = str(one["id"])[:8]
    by_prefix = (await controller.client.get(f"/api/v1/audit?remediation={prefix}")).json()
    assert by_prefix and {e["remediation_id"] for e in by_prefix} == {one["id"]}

    firsts: dict[str, list[str]] = {}
    for r in rems:
        firsts.setdefault(str(r["id"])[0], []).append(str(r["id"]))
    shared, ids = next((k, v) for k, v in firsts.items() if len(v) > 1)
    ambiguous = await controller.client.get(f"/api/v1/audit?remediation={shared}")
    assert ambiguous.status_code == 422 and all(i in ambiguous.text for i in ids), ambiguous.text
    missing = await controller.client.get("/api/v1/audit?remediation=ffffffff-0000")
    assert missing.status_code == 422 and "ffffffff-0000" in missing.text


async def test_a_refused_move_names_the_state_and_the_actions_it_allows(controller: Controller) -> None:
    (rem,) = await _fire(controller, 1)
    await controller.worker.drain_idle()
    cancel = await controller.client.post(f"/api/v1/remediations/{rem['id']}/cancel", json={"reason": "test"})
    assert cancel.status_code == 409
    text = cancel.json()["error"]
    assert text.startswith("cannot cancel a remediation that is planned; allowed in planned: revert"), text
    release = await controller.client.post(f"/api/v1/remediations/{rem['id']}/release")
    assert release.status_code == 409 and "that is planned; allowed in planned: revert" in release.text
    for answer in (cancel, release):
        assert "Event." not in answer.text and "<" not in answer.text


async def test_an_operators_cancel_is_not_an_error_in_why_nothing_happened(controller: Controller) -> None:
    (rem,) = await _fire(controller, 1)
    r = await controller.client.post(f"/api/v1/remediations/{rem['id']}/cancel", json={"reason": "test"})
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    items = (await controller.client.get("/api/v1/alerts/unacted")).json()
    assert [(i["reason"], i["remediation_state"]) for i in items] == [("cancelled", "cancelled")]
    assert (await controller.client.get("/api/v1/alerts/unacted?reason=error")).json() == []
