"""The worker's self-monitoring gauges: the audit check result and the age of the oldest active remediation."""

from __future__ import annotations

from sqlalchemy import update

from remediator.store.models import AuditEvent
from tests.engine.conftest import Cluster, MakeCluster


def sample(cluster: Cluster, name: str, **labels: str) -> float | None:
    return cluster.rt.metrics.registry.get_sample_value(name, labels or None)


async def test_audit_check_sets_the_gauge_and_a_tampered_chain_stays_failed(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    async with cluster.rt.repo.transaction() as session:
        await cluster.rt.repo.audit(session, "test.event", data={"i": 1})
    assert await cluster.worker.verify_audit() is True
    assert sample(cluster, "remediator_audit_verify_ok") == 1
    async with cluster.rt.repo.transaction() as session:
        await cluster.rt.repo.audit(session, "test.event", data={"i": 2})
    async with cluster.rt.repo.transaction() as session:  # an event appended since the check is edited
        await session.execute(update(AuditEvent).where(AuditEvent.data == {"i": 2}).values(data={"i": 3}))
    assert await cluster.worker.verify_audit() is False
    assert sample(cluster, "remediator_audit_verify_ok") == 0
    assert await cluster.worker.verify_audit() is False, "a failed check stays failed"


async def test_gauges_read_zero_for_states_that_emptied(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    cluster.rt.metrics.remediations_active.labels(state="running").set(3)
    await cluster.worker._refresh_gauges()
    assert sample(cluster, "remediator_remediations_active", state="running") == 0
    for state in ("pending", "held", "awaiting_approval", "running", "reverting"):
        assert sample(cluster, "remediator_oldest_active_seconds", state=state) == 0
