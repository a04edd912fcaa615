"""Every process that holds a GPU's device files, so a reset is refused while any client has the device open.

NVIDIA's GPU reset needs that no client holds the device: compute processes (which NVML lists) but also the
DCGM host engine (nv-hostengine, or the one dcgm-exporter embeds), nvidia-persistenced, the device plugin,
gpu-feature-discovery and, on NVSwitch systems, Fabric Manager, none of which NVML lists as processes. They
are found the way `fuser` finds them: each /proc/<pid>/fd entry is a symlink to what the descriptor holds.

A process holds the GPU when it has the GPU's own /dev/nvidia<minor> open, or the shared control files
(/dev/nvidiactl, /dev/nvidia-uvm) without any /dev/nvidia<N> at all (it may reach any GPU). A process that
holds only other GPUs' device files does not hold this one. Each holder is named by its program (cmdline,
else comm), sorted into a kind, and by its pod where its cgroup names one (remediator/sidecar/cgroups.py).
`proc_root` is a setting, so tests point it at a fake tree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from remediator.domain.json_values import JsonObject
from remediator.sidecar.cgroups import pod_of_pid

__all__ = ["Holder", "describe_holder", "find_holders", "holder_kind"]

_GPU_FILE = re.compile(r"^/dev/nvidia(\d+)$")
SHARED_FILES = frozenset({"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"})

# Program name (argv[0]'s base name, or comm which the kernel cuts to 15 characters) -> kind.
_KINDS: tuple[tuple[str, str], ...] = (
    ("nv-hostengine", "dcgm-hostengine"),
    ("dcgm-exporter", "dcgm-exporter"),
    ("nvidia-persiste", "persistenced"),
    ("nv-fabricmanage", "fabric-manager"),
    ("nvidia-device-p", "device-plugin"),
    ("gpu-feature-dis", "gpu-feature-discovery"),
)


def holder_kind(program: str) -> str:
    """The kind of a holder from its program name; `process` for anything else (a workload)."""
    for prefix, kind in _KINDS:
        if program.startswith(prefix):
            return kind
    return "process"


@dataclass(frozen=True)
class Holder:
    pid: int
    program: str
    kind: str
    files: tuple[str, ...]
    pod_uid: str | None
    container_id: str | None

    def as_dict(self) -> JsonObject:
        return {"pid": self.pid, "program": self.program, "kind": self.kind, "files": [*self.files],
                "pod_uid": self.pod_uid, "container_id": self.container_id}


def describe_holder(holder: Mapping[str, object]) -> str:
    """`pid 12 nv-hostengine (dcgm-hostengine) in pod <uid>`, for refusal messages."""
    if holder.get("kind") == "persistence-mode":
        return "persistence mode on"
    where = f" in pod {holder['pod_uid']}" if holder.get("pod_uid") else ""
    kind = holder.get("kind")
    shown = f" ({kind})" if kind and kind != "process" else ""
    return f"pid {holder.get('pid')} {holder.get('program')}{shown}{where}"



def _program(pid_dir: Path) -> str:
    try:
        argv0 = (pid_dir / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        argv0 = ""
    if argv0:
        return os.path.basename(argv0)
    try:
        return (pid_dir / "comm").read_text(errors="replace").strip() or "?"
    except OSError:
        return "?"


def _open_files(pid_dir: Path) -> set[str] | None:
    """What the process's descriptors point at; None when its fd table cannot be read."""
    try:
        entries = list(os.scandir(pid_dir / "fd"))
    except FileNotFoundError:
        return set()
    except OSError:
        return None
    targets = set()
    for entry in entries:
        try:
            targets.add(os.readlink(entry.path))
        except OSError:
            continue  # closed meanwhile
    return targets


def find_holders(
    proc_root: Path, minor: int, exclude: Collection[int] = ()
) -> tuple[list[Holder], list[int]]:
    """(holders of /dev/nvidia<minor>, pids whose descriptors could not be read), pids in `exclude` skipped."""
    own = f"/dev/nvidia{minor}"
    holders: list[Holder] = []
    unreadable: list[int] = []
    try:
        pid_dirs = [d for d in proc_root.iterdir() if d.name.isdigit()]
    except OSError:
        return [], []
    for pid_dir in sorted(pid_dirs, key=lambda d: int(d.name)):
        pid = int(pid_dir.name)
        if pid in exclude:
            continue
        files = _open_files(pid_dir)
        if files is None:
            unreadable.append(pid)
            continue
        gpu_files = {f for f in files if _GPU_FILE.match(f)}
        shared = files & SHARED_FILES
        if own not in gpu_files and not (shared and not gpu_files):
            continue
        held = sorted(({own} & gpu_files) | shared)
        owner = pod_of_pid(proc_root, pid)
        program = _program(pid_dir)
        holders.append(Holder(pid, program, holder_kind(program), tuple(held),
                              owner.pod_uid if owner else None, owner.container_id if owner else None))
    return holders, unreadable
