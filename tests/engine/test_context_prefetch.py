"""An idle worker reads the context of each remediation it will be handed while the deciding transaction
commits: the drive takes that read instead of reading again, and reads for alerts the batch did
not start (linked to an active remediation) are dropped."""

from __future__ import annotations

from typing import Any

import pytest

from remediator.engine.early_contexts import ContextPrefetch
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_claimed_rows import record_calls
from tests.engine.test_pipeline import gpu_node
from tests.helpers import am_alert, am_payload, xid_labels


async def test_the_context_is_read_while_the_decision_commits_and_only_once(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    calls: list[tuple[str, Any]] = []
    executor = cluster.worker.executor
    real_read = executor.read_context

    def read_context(*args: Any, **kwargs: Any) -> Any:
        calls.append(("read_context", None))
        return real_read(*args, **kwargs)

    monkeypatch.setattr(executor, "read_context", read_context)
    record_calls(cluster, monkeypatch, calls, "record_and_lease", "admit_many")
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    names = [name for name, _ in calls]
    assert names[:3] == ["read_context", "record_and_lease", "admit_many"]  # started before the commit
    assert names.count("read_context") == 1  # the drive took it instead of reading again
    assert {p["name"] for p in rem["context"]["pods"]} >= {"trainer-abc-1", "trainer-abc-2"}
    assert rem["context"]["node"]["name"] == "gpu-1"
    assert len(executor.contexts) == 0


async def test_reads_for_alerts_the_batch_did_not_start_are_dropped(make_cluster: MakeCluster) -> None:
    """Two alerts of one GPU in one webhook: one remediation starts, the other alert is linked to it."""
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    first = am_alert(xid_labels("gpu-1", 79))
    second = am_alert({**xid_labels("gpu-1", 79), "err_msg": "a second line of the same fault"})
    await cluster.post(am_payload(first, second))
    await cluster.worker.process_alerts()
    assert len(cluster.worker._handed) == 1
    assert len(cluster.worker.executor.contexts) == 1  # the linked alert's read was cancelled
    await cluster.settle()
    assert len(cluster.worker.executor.contexts) == 0


async def test_a_failed_read_ahead_is_read_again_by_the_drive() -> None:
    contexts = ContextPrefetch()

    async def fails() -> dict[str, Any]:
        raise RuntimeError("apiserver hiccup")

    contexts.start(7, fails())
    assert await contexts.take(7) is None
    assert await contexts.take(8) is None
    await contexts.close()
