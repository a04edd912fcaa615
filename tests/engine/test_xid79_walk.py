"""docs/architecture.md follows one Xid 79 alert from the webhook to the uncordon: the files it names are the
ones the alert passes through, at most 15 of them, and the engine/store crossings it counts are measured here
(tests/engine/walk.py). Run with `-s` to print the figures."""

from __future__ import annotations

import re
from pathlib import Path

from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.engine.walk import Walk
from tests.helpers import am_alert, am_payload, xid_labels

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def walk_section() -> str:
    text = DOC.read_text()
    start = text.index("## One Xid 79 alert")
    end = text.find("\n## ", start + 3)
    return text[start:end if end != -1 else len(text)]


def named_files(section: str) -> list[str]:
    """The files of the walk-through's table: its first column, `remediator/...py`."""
    return re.findall(r"^\|\s*\d+\s*\|\s*`(remediator/[\w/]+\.py)`", section, re.M)


def stated(section: str, label: str) -> int:
    found = re.search(rf"{label}:\s*\*\*(\d+)\*\*", section)
    assert found, f"the walk-through states no '{label}: **N**'"
    return int(found.group(1))


async def test_the_walk_through_names_the_files_and_counts_the_crossings(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    with Walk() as firing:
        await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
        await cluster.settle()
    cluster.fake.reboot_node("gpu-1")
    with Walk() as resolving:
        await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79), status="resolved")))
        await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "reverted"
    node = cluster.fake.node("gpu-1")
    assert node is not None and not node["spec"].get("unschedulable")  # the walk ends at the uncordon

    visited = firing.modules | resolving.modules
    to_store = [w.crossings("engine", "store") for w in (firing, resolving)]
    to_engine = [w.crossings("store", "engine") for w in (firing, resolving)]
    print(f"\nmodules visited: {len(visited)}")
    for label, (calls, edges) in (("engine->store firing", to_store[0]), ("engine->store resolving", to_store[1]),
                                  ("store->engine firing", to_engine[0]),
                                  ("store->engine resolving", to_engine[1])):
        print(f"{label}: {calls} calls over {edges} distinct call sites")

    section = walk_section()
    files = named_files(section)
    assert 0 < len(files) <= 15, files
    assert len(set(files)) == len(files)
    missing = [f for f in files if f not in visited]
    assert not missing, f"named in the walk-through but not on the alert's path: {missing}"
    # Distinct call sites do not depend on timing (how often a loop polled); the stated figures are those.
    assert stated(section, "engine to store, firing") == to_store[0][1]
    assert stated(section, "engine to store, resolving") == to_store[1][1]
    assert stated(section, "store to engine") == to_engine[0][1] + to_engine[1][1]
