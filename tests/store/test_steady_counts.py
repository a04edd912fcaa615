"""An admission batch's facts about each remediation alone (its override, how often its alert flapped, its
node's recent remediations) read in one statement for the whole batch, on SQLite and PostgreSQL, each answer
the one its own query asks for; a flag's value read in SQL."""

from __future__ import annotations

from datetime import timedelta

from remediator.intake.models import AlertmanagerPayload
from remediator.store.flag_store import OVERRIDE_FLAG_PREFIX, PAUSE_FLAG
from remediator.store.read_store import SteadyQuery, flag_value, steady_counts
from remediator.store.repository import Repository, utcnow
from tests.helpers import am_alert, am_payload, fingerprint, xid_labels
from tests.store.test_approval_decisions import store, store_url  # noqa: F401  (fixtures)


def query(rem: str, labels: dict[str, str], *, node: str | None = None) -> SteadyQuery:
    now = utcnow()
    return SteadyQuery(override_key=f"{OVERRIDE_FLAG_PREFIX}{rem}", fingerprint=fingerprint(labels),
                       flap_since=now - timedelta(hours=1), node=node, node_since=now - timedelta(days=1),
                       exclude=rem)


async def test_one_statement_answers_each_remediation_of_a_batch(store: Repository) -> None:  # noqa: F811
    flapping = xid_labels("gpu-1", 79)
    quiet = xid_labels("gpu-2", 48, gpu="1", uuid="GPU-8e6a1c2d-0000-4000-8000-000000000002")
    for i in range(3):  # fired and resolved three times within the window; a repeated delivery does not count
        fired = am_alert(flapping, starts_at=f"2026-12-02T1{i}:00:00Z")
        resolved = am_alert(flapping, status="resolved", starts_at=f"2026-12-02T1{i}:00:00Z")
        for alert in (fired, resolved, resolved):
            await store.store_batch(AlertmanagerPayload.model_validate(am_payload(alert)))
    await store.set_flag(f"{OVERRIDE_FLAG_PREFIX}rem-b", {"by": "oncall"}, audit_kind="guardrail.override",
                         actor="oncall")

    async with store.reading() as session:
        assert await steady_counts(session, []) == []
        first, second = await steady_counts(session, [query("rem-a", flapping, node="gpu-1"), query("rem-b", quiet)])
        assert await flag_value(session, PAUSE_FLAG) is None
    assert (first.override, first.flaps, first.node_remediations) == (False, 3, 0)
    assert (second.override, second.flaps, second.node_remediations) == (True, 0, 0)
    assert first.pause is None  # filled by the admission, under its lock

    await store.set_flag(PAUSE_FLAG, {"paused": True, "by": "oncall"}, audit_kind="controller.paused",
                         actor="oncall")
    async with store.reading() as session:
        assert await flag_value(session, PAUSE_FLAG) == {"paused": True, "by": "oncall"}
