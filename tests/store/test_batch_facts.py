"""The repeated-Xid escalation's count: the store selects a batch's recent alerts by node label in SQL, and
`BatchFacts` hands each alert those of its name on its GPU."""

from __future__ import annotations

from datetime import timedelta

from remediator.engine.batch_facts import BatchFacts
from remediator.intake.models import AlertmanagerPayload
from remediator.intake.normalize import GpuAlert
from remediator.store.db import make_engine, make_sessionmaker, upgrade
from remediator.store.repository import Repository, utcnow
from tests.helpers import am_alert, am_payload


async def test_only_first_firing_deliveries_on_that_node_and_gpu_count(repo: Repository) -> None:
    await check_selection(repo)


async def test_the_same_selection_on_postgresql(pg_url: str) -> None:
    """The JSON label comparison is SQL of each dialect: run it on PostgreSQL too."""
    await upgrade(pg_url)
    engine = make_engine(pg_url)
    try:
        await check_selection(Repository(make_sessionmaker(engine)))
    finally:
        await engine.dispose()


async def check_selection(repo: Repository) -> None:
    wanted = [
        {"alertname": "GPUXidError", "Hostname": "n1", "UUID": "GPU-A", "xid": "13", "pod": "p1"},
        {"alertname": "GPUXidError", "node": "n1", "gpu": "GPU-A", "xid": "13", "pod": "p2"},
        {"alertname": "GPUXidError", "kubernetes_node": "n1", "UUID": "GPU-A", "xid": "13", "pod": "p3"},
    ]
    others = [
        {"alertname": "GPUXidError", "Hostname": "n2", "UUID": "GPU-A", "xid": "13"},  # another node
        {"alertname": "GPUXidError", "Hostname": "n1", "UUID": "GPU-B", "xid": "13"},  # another GPU
        {"alertname": "GPUEccError", "Hostname": "n1", "UUID": "GPU-A"},  # another alert
        {"alertname": "GPUXidError", "Hostname": "n1-suffix", "UUID": "GPU-A", "xid": "13"},  # not a prefix match
    ]
    alerts = [am_alert(labels) for labels in wanted + others]
    alerts.append(am_alert(wanted[0], status="resolved"))
    await repo.store_batch(AlertmanagerPayload.model_validate(am_payload(*alerts)))
    await repo.store_batch(AlertmanagerPayload.model_validate(am_payload(am_alert(wanted[0]))))  # a repeat

    node_labels = ("node", "kubernetes_node", "Hostname", "hostname")
    now = utcnow()
    recent = await repo.firing_alerts_on_nodes(["GPUXidError"], ["n1"], now - timedelta(hours=1), node_labels)
    # the three wanted and the other GPU on n1; not n2, not "n1-suffix", not the resolved one, not the repeat
    assert len(recent) == 4
    facts = BatchFacts(now, recent, {}, node_labels).of(
        GpuAlert(alertname="GPUXidError", status="firing", fingerprint="f", kind="xid", node="n1",
                 node_source="Hostname", gpu_uuid="GPU-A")
    )
    assert sorted(labels["pod"] for labels, _ in facts.gpu_alerts) == ["p1", "p2", "p3"]
    assert await repo.firing_alerts_on_nodes(["GPUXidError"], ["n1"], now + timedelta(hours=1), node_labels) == []
