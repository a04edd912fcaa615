"""Every write the controller makes (Kubernetes API, node sidecar) becomes an audit event (verb, object,
outcome).

The executor marks which remediation is acting through a context variable; the adapters report each write
to the recorder built here, which appends `kube.<verb>` (or `sidecar.<verb>`) to the hash-chained log.
"""

from __future__ import annotations

from contextvars import ContextVar

from remediator.adapters.mutations import Mutation, MutationRecorder
from remediator.store.repository import Repository

__all__ = ["acting_remediation", "audit_recorder"]

acting_remediation: ContextVar[str | None] = ContextVar("acting_remediation", default=None)


def audit_recorder(repo: Repository) -> MutationRecorder:
    async def record(mutation: Mutation) -> None:
        async with repo.transaction() as session:
            await repo.audit(
                session,
                f"{'sidecar' if mutation.resource.startswith('sidecar/') else 'kube'}.{mutation.verb}",
                remediation_id=acting_remediation.get(),
                data={
                    "resource": mutation.resource,
                    "namespace": mutation.namespace,
                    "name": mutation.name,
                    "status": mutation.status,
                    "outcome": "ok" if mutation.error is None else "error",
                    "error": mutation.error,
                },
            )

    return record
