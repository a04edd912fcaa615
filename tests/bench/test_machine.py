"""The machine a benchmark names is read from the machine, never a host name or a constant.

The lent 16-core GPU hosts call themselves `vm` like the 2-vCPU VM, so figures were once filed under the
wrong machine. These tests hold bench/_machine.py to what the kernel reports here, and, on a made-up
/proc and /sys, to what those files say.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

import pytest

from bench._machine import describe

ROOT = Path(__file__).resolve().parents[2]


def no_commands(command: list[str]) -> str | None:
    return None


def test_this_machine_as_the_kernel_reports_it() -> None:
    machine = describe()
    assert machine.usable_cores == len(os.sched_getaffinity(0))
    cpuinfo = Path("/proc/cpuinfo").read_text()
    models = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    if models:
        assert machine.cpu_model == models[0].strip()
    total = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    assert total is not None
    mem_kib = int(total[1])
    assert machine.memory_gib == round(mem_kib / 2**20, 1)
    assert machine.kernel == os.uname().release
    assert machine.arch == os.uname().machine
    assert machine.python == platform.python_version()
    line = machine.line()
    assert f"{len(os.sched_getaffinity(0))} usable cores" in line
    assert machine.cpu_model in line and os.uname().release in line


def test_affinity_counts_the_cores_this_process_may_use() -> None:
    """A process pinned to one CPU reports one usable core, whatever the host has."""
    assert describe(affinity={3}).usable_cores == 1
    assert "1 usable cores" in describe(affinity={3}).line()


def fake_root(tmp_path: Path, *, cpuinfo: str, meminfo: str, cgroup: str, files: dict[str, str]) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/cpuinfo").write_text(cpuinfo)
    (tmp_path / "proc/meminfo").write_text(meminfo)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_a_16_core_host_in_a_cgroup_v2_quota(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        cpuinfo="processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu hypervisor sse\n",
        meminfo="MemTotal:       131072000 kB\nMemFree: 1 kB\n",
        cgroup="0::/kubepods/pod1\n",
        files={
            "sys/fs/cgroup/kubepods/pod1/cpu.max": "400000 100000\n",
            "sys/fs/cgroup/kubepods/cpu.max": "max 100000\n",
            "sys/fs/cgroup/kubepods/pod1/memory.max": str(8 * 2**30),
            "sys/devices/system/cpu/online": "0-15\n",
            "sys/class/dmi/id/product_name": "KVM\n",
        },
    )
    gpu = "NVIDIA H200, 143771 MiB, 580.159.04"
    machine = describe(root, lambda cmd: gpu if cmd[0] == "nvidia-smi" else None, affinity=set(range(16)))
    assert machine.cpu_model == "Intel(R) Xeon(R) Platinum 8480+"
    assert (machine.online_cpus, machine.usable_cores, machine.cpu_quota) == (16, 16, 4.0)
    assert (machine.memory_gib, machine.memory_limit_gib) == (125.0, 8.0)
    assert machine.virtualization == ("DMI product 'KVM'", "cpuinfo hypervisor flag")
    assert machine.gpus == ("NVIDIA H200 (143771 MiB, driver 580.159.04)",)
    line = machine.line()
    assert "16 usable cores of 16 online, cgroup CPU quota 4" in line
    assert "125.0 GiB memory (cgroup limit 8.0 GiB)" in line
    assert "GPU: NVIDIA H200 (143771 MiB, driver 580.159.04)" in line


def test_cgroup_v1_quota_and_an_unlimited_memory_cgroup(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        cpuinfo="processor\t: 0\nModel\t: Raspberry Pi 4 Model B\n",
        meminfo="MemTotal:        2097152 kB\n",
        cgroup="4:memory:/job\n1:cpu,cpuacct:/job\n",
        files={
            "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "150000\n",
            "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/memory/job/memory.limit_in_bytes": "9223372036854771712\n",
        },
    )
    machine = describe(root, no_commands, affinity={0, 1, 2, 3})
    assert machine.cpu_model == "Raspberry Pi 4 Model B"
    assert (machine.usable_cores, machine.cpu_quota) == (4, 1.5)
    assert (machine.memory_gib, machine.memory_limit_gib) == (2.0, None)
    assert machine.virtualization == () and machine.gpus == ()
    assert "virtualization: none detected, GPU: none" in machine.line()


def test_a_quota_above_the_usable_cores_is_not_reported(tmp_path: Path) -> None:
    root = fake_root(tmp_path, cpuinfo="model name : X\n", meminfo="MemTotal: 1048576 kB\n", cgroup="0::/\n",
                     files={"sys/fs/cgroup/cpu.max": "800000 100000\n"})
    assert describe(root, no_commands, affinity={0, 1}).cpu_quota is None


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").glob("*.py")))
def test_no_benchmark_names_its_machine_by_host_name_alone(script: str) -> None:
    """Every benchmark that reports a machine uses bench/_machine.py, not platform.node() or os.cpu_count()."""
    text = (ROOT / "bench" / script).read_text()
    assert "platform.node()" not in text
    if script != "_machine.py":
        assert "os.cpu_count()" not in text
    if "machine" in text and script not in ("_machine.py", "_servers.py", "bare_app.py", "__init__.py"):
        assert "from bench._machine import describe" in text
