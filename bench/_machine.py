"""What machine a benchmark ran on, read from the machine itself.

Figures compare only on one machine, and the host name does not say which: the lent 16-core GPU hosts
call themselves `vm`, as the 2-vCPU VM does. So every benchmark prints this description instead, built
from what the kernel reports: the CPU model (/proc/cpuinfo), the cores this process may use (its CPU
affinity, and a cgroup CPU quota when one is set), memory (/proc/meminfo, and a cgroup memory limit),
the kernel, hints of virtualisation (systemd-detect-virt, the DMI product name, the cpuinfo `hypervisor`
flag, a container marker file) and the GPUs nvidia-smi lists. `python bench/_machine.py` prints it.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

Probe = Callable[[list[str]], str | None]


@dataclass(frozen=True)
class Machine:
    host: str
    cpu_model: str
    online_cpus: int
    usable_cores: int  # len(os.sched_getaffinity(0)): the CPUs this process may run on
    cpu_quota: float | None  # cgroup CPU quota in CPUs (quota / period); None when unlimited
    memory_gib: float  # MemTotal
    memory_limit_gib: float | None  # cgroup memory limit; None when unlimited or above MemTotal
    kernel: str
    arch: str
    virtualization: tuple[str, ...]
    gpus: tuple[str, ...]
    python: str

    def cores_line(self) -> str:
        cores = f"{self.usable_cores} usable cores of {self.online_cpus} online"
        return cores + (f", cgroup CPU quota {self.cpu_quota:g}" if self.cpu_quota is not None else "")

    def line(self) -> str:
        """One line for a benchmark's header: everything needed to tell two machines apart."""
        memory = f"{self.memory_gib:.1f} GiB memory"
        if self.memory_limit_gib is not None:
            memory += f" (cgroup limit {self.memory_limit_gib:.1f} GiB)"
        virt = ", ".join(self.virtualization) or "none detected"
        gpus = "; ".join(self.gpus) or "none"
        return (f"host {self.host}: {self.cpu_model}, {self.cores_line()}, {memory}, kernel {self.kernel} "
                f"{self.arch}, virtualization: {virt}, GPU: {gpus}, Python {self.python}")

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "line": self.line()}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def cpu_model(root: Path) -> str:
    """The first `model name` (x86) or `Model`/`Hardware` line (Arm) of /proc/cpuinfo."""
    text = _read(root / "proc/cpuinfo") or ""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        for line in text.splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key and value.strip():
                return value.strip()
    return platform.processor() or "unknown CPU"


def _cgroup_dirs(root: Path, controller: str) -> list[Path]:
    """The cgroup directories of this process for a controller, innermost first, v2 and v1 alike."""
    base = root / "sys/fs/cgroup"
    found: list[Path] = []
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # cgroup v2, unified hierarchy
            top = base
        elif controller in controllers.split(","):
            top = base / controllers if (base / controllers).is_dir() else base / controller
        else:
            continue
        rel = Path(path.lstrip("/"))
        found.extend(top / p for p in (rel, *rel.parents))
    return [d for d in dict.fromkeys(found) if d.is_dir()] or [base, base / controller]


def cpu_quota(root: Path) -> float | None:
    """The tightest cgroup CPU quota over this process's cgroup and its parents, in CPUs."""
    quotas: list[float] = []
    for d in _cgroup_dirs(root, "cpu"):
        v2 = _read(d / "cpu.max")
        if v2 is not None:
            quota, period = [*v2.split(), "100000"][:2]
            if quota != "max" and int(period) > 0:
                quotas.append(int(quota) / int(period))
            continue
        q, p = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if q is not None and p is not None and int(q) > 0 and int(p) > 0:
            quotas.append(int(q) / int(p))
    return min(quotas) if quotas else None


def memory(root: Path) -> tuple[float, float | None]:
    """MemTotal in GiB, and the tightest cgroup memory limit below it (None when there is none)."""
    total_kib = 0
    for line in (_read(root / "proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            total_kib = int(line.split()[1])
    total = total_kib / 2**20
    limits: list[float] = []
    for d in _cgroup_dirs(root, "memory"):
        raw = _read(d / "memory.max") or _read(d / "memory.limit_in_bytes")
        if raw is not None and raw.strip().isdigit():
            limits.append(int(raw) / 2**30)
    limit = min(limits) if limits else None
    return total, (limit if limit is not None and limit < total else None)


def _run(command: list[str]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def virtualization(root: Path, probe: Probe) -> tuple[str, ...]:
    hints: list[str] = []
    detected = probe(["systemd-detect-virt"])
    if detected:
        hints.append(f"systemd-detect-virt {detected}")
    product = (_read(root / "sys/class/dmi/id/product_name") or "").strip()
    if product:
        hints.append(f"DMI product {product!r}")
    if any(line.startswith("flags") and " hypervisor" in line
           for line in (_read(root / "proc/cpuinfo") or "").splitlines()):
        hints.append("cpuinfo hypervisor flag")
    if (root / ".dockerenv").exists() or (root / "run/.containerenv").exists():
        hints.append("container marker file")
    version = _read(root / "proc/version") or ""
    if "gVisor" in version or "gvisor" in version:
        hints.append("gVisor")
    return tuple(hints)


def gpus(probe: Probe) -> tuple[str, ...]:
    out = probe(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    found: list[str] = []
    for line in (out or "").splitlines():
        cells = [c.strip() for c in line.split(",")]
        found.append(f"{cells[0]} ({cells[1]}, driver {cells[2]})" if len(cells) == 3 else line.strip())
    return tuple(found)


def describe(root: Path = Path("/"), probe: Probe = _run, affinity: set[int] | None = None) -> Machine:
    """This machine as the kernel reports it; `root`, `probe` and `affinity` stand in for it in tests."""
    if affinity is None:
        affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    online = (_read(root / "sys/devices/system/cpu/online") or "").strip()
    online_cpus = _count_cpu_list(online) if online else (os.cpu_count() or len(affinity))
    total, limit = memory(root)
    quota = cpu_quota(root)
    uname = os.uname()
    return Machine(
        host=uname.nodename, cpu_model=cpu_model(root), online_cpus=online_cpus, usable_cores=len(affinity),
        cpu_quota=round(quota, 2) if quota is not None and quota < len(affinity) else None,
        memory_gib=round(total, 1), memory_limit_gib=round(limit, 1) if limit is not None else None,
        kernel=uname.release, arch=uname.machine, virtualization=virtualization(root, probe), gpus=gpus(probe),
        python=platform.python_version(),
    )


def _count_cpu_list(text: str) -> int:
    """`0-3,8,10-11` -> 7 (the kernel's CPU list format)."""
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        count += (int(high) - int(low) + 1) if high else 1
    return count


if __name__ == "__main__":
    print(describe().line())
