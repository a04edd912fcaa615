"""The worker's self-monitoring gauges: the audit check result, the age of the oldest active remediation and
the alerts not yet decided."""

from __future__ import annotations

from sqlalchemy import update

from remediator.store.models import AuditEvent
from remediator.store.repository import Repository
from tests.engine.conftest import Cluster, MakeCluster
from tests.store.test_intake_spool import xid_79


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


async def test_undecided_alerts_are_counted_where_they_wait(make_cluster: MakeCluster) -> None:
    """Acknowledged but not yet decided: in the intake spool (a web process in worker-process mode stored
    them) or in the database."""
    cluster: Cluster = await make_cluster()
    web = Repository(cluster.rt.repo._sessions)  # the web process's store on the same database file
    await web.spool_webhooks()
    try:
        await web.store_batch(xid_79("u1"))
        await web.store_batch(xid_79("u2"))
        await cluster.rt.repo.store_batch(xid_79("u3"))
        await cluster.worker._refresh_gauges()
        assert sample(cluster, "remediator_alerts_undecided", where="spooled") == 2
        assert sample(cluster, "remediator_alerts_undecided", where="stored") == 1
        await cluster.rt.repo.move_spooled(1000)
        await cluster.worker._refresh_gauges()
        assert sample(cluster, "remediator_alerts_undecided", where="spooled") == 0
        assert sample(cluster, "remediator_alerts_undecided", where="stored") == 3
    finally:
        await web.close()
