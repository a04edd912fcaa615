"""Which pod a process belongs to, read from /proc/<pid>/cgroup.

The kubelet names each pod's cgroup after the pod UID. Both drivers and both cgroup versions are
understood: cgroupfs (`/kubepods/burstable/pod<uid>/<container>`) and systemd
(`kubepods-burstable-pod<uid with underscores>.slice/cri-containerd-<id>.scope`), v1 (one line per
controller) and v2 (a single `0::` line). `proc_root` is a setting so tests can point it at a fake tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PodCgroup", "parse_cgroup", "pod_of_pid"]

_HEX = "[0-9a-fA-F]"
_UID = f"{_HEX}{{8}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{12}}"
_POD = re.compile(rf"pod({_UID})(?:\.slice)?(?=/|$)")
_CONTAINER = re.compile(r"^(?:cri-containerd-|docker-|crio-|containerd-)?([0-9a-fA-F]{12,64})(?:\.scope)?$")


@dataclass(frozen=True)
class PodCgroup:
    """A pod UID (with dashes, lower case) and, where the path shows it, the container id."""

    pod_uid: str
    container_id: str | None


def parse_cgroup(text: str) -> PodCgroup | None:
    """The pod of a /proc/<pid>/cgroup file's contents, or None for a process outside any pod."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        found = _POD.search(path)
        if found is None:
            continue
        uid = found.group(1).replace("_", "-").lower()
        rest = path[found.end() :].strip("/")
        container = None
        if rest:
            match = _CONTAINER.match(rest.split("/")[0])
            container = match.group(1).lower() if match else None
        return PodCgroup(uid, container)
    return None


def pod_of_pid(proc_root: Path, pid: int) -> PodCgroup | None:
    """The pod a process runs in; None when it is a host process or already gone."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    return parse_cgroup(text)
