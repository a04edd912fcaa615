"""Storing webhook batches: one transaction, repeats recorded but never claimable, claims expire."""

from __future__ import annotations

from datetime import timedelta

from remediator.intake.models import AlertmanagerPayload
from remediator.store.repository import Repository


def payload(
    status: str = "firing", fingerprint: str = "f1", starts: str = "2026-12-02T10:00:00Z"
) -> AlertmanagerPayload:
    return AlertmanagerPayload.model_validate({
        "version": "4", "groupKey": "{}:{}", "status": status, "receiver": "gpu-remediator",
        "alerts": [{
            "status": status, "labels": {"alertname": "GPUXidError", "Hostname": "n1", "xid": "79"},
            "annotations": {}, "startsAt": starts,
            "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-12-02T10:05:00Z",
            "generatorURL": "", "fingerprint": fingerprint,
        }],
    })


async def test_repeat_delivery_is_recorded_but_not_claimable(repo: Repository) -> None:
    first = await repo.store_batch(payload())
    second = await repo.store_batch(payload())
    assert (first.repeats, second.repeats) == (0, 1)
    claimed = await repo.claim_alerts("w1", 10, timedelta(seconds=30))
    assert len(claimed) == 1
    alerts = await repo.list_alerts()
    assert [a.state for a in alerts] == ["new", "repeat"]
    assert alerts[1].repeat_of == alerts[0].id


async def test_firing_then_resolved_are_distinct_deliveries(repo: Repository) -> None:
    await repo.store_batch(payload("firing"))
    out = await repo.store_batch(payload("resolved"))
    assert out.repeats == 0


async def test_claims_are_exclusive_until_they_expire(repo: Repository) -> None:
    await repo.store_batch(payload())
    assert len(await repo.claim_alerts("w1", 10, timedelta(seconds=30))) == 1
    assert await repo.claim_alerts("w2", 10, timedelta(seconds=30)) == []
    await repo.store_batch(payload(fingerprint="f2"))
    expired = await repo.claim_alerts("w3", 10, timedelta(seconds=-1))
    assert [a.fingerprint for a in expired] == ["f2"]
    again = await repo.claim_alerts("w4", 10, timedelta(seconds=30))
    assert [a.fingerprint for a in again] == ["f2"]
