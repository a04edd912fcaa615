"""The repeated-Xid escalation's count: the store selects a batch's recent alerts by node label in SQL, and
`BatchFacts` hands each alert those of its name on its GPU."""

from __future__ import annotations

from datetime import timedelta

from remediator.engine.decision_facts import BatchFacts
from remediator.intake.models import AlertmanagerPayload
from remediator.intake.normalize import GpuAlert
from remediator.store.db import make_engine, make_sessionmaker, upgrade
from remediator.store.repository import Repository, utcnow
from tests.helpers import am_alert, am_payload, xid_labels


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


def xid_on(node: str, uuid: str, *, node_label: str = "Hostname", **extra: str) -> dict[str, str]:
    """dcgm-exporter's Xid alert labels (tests/helpers.py), with the node under `node_label`."""
    labels = xid_labels(node, 13, uuid=uuid, **extra)
    labels[node_label] = labels.pop("Hostname")
    return labels


async def check_selection(repo: Repository) -> None:
    wanted = [
        xid_on("n1", "GPU-A", pod="p1"),
        xid_on("n1", "GPU-A", node_label="node", pod="p2"),
        xid_on("n1", "GPU-A", node_label="kubernetes_node", pod="p3"),
    ]
    ecc = {**xid_on("n1", "GPU-A"), "alertname": "GPUECCUncorrectableError"}
    del ecc["xid"]
    others = [
        xid_on("n2", "GPU-A"),  # another node
        xid_on("n1", "GPU-B"),  # another GPU
        ecc,  # another alert
        xid_on("n1-suffix", "GPU-A"),  # not a prefix match
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
