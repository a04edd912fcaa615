"""Build the fake libnvidia-ml.so.1 (fakenvml.c) and read/write the state file it runs on.

The real pynvml bindings load the fake through LD_LIBRARY_PATH in a sidecar subprocess; the test
process and the fake share nothing but the state file named by FAKE_NVML_STATE.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fakenvml.c"
BUILD_DIR = HERE / "build"
LIBRARY = BUILD_DIR / "libnvidia-ml.so.1"

MIB = 1024 * 1024


def build() -> Path:
    """Compile the fake (when missing or older than its source); returns the directory holding it."""
    if LIBRARY.exists() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BUILD_DIR
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("gcc is needed to build the fake NVML library (apt-get install -y gcc)")
    BUILD_DIR.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=BUILD_DIR, suffix=".so")
    os.close(fd)
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Wl,-soname,libnvidia-ml.so.1", "-o", tmp, str(SOURCE), "-lpthread"],
        check=True,
    )
    os.replace(tmp, LIBRARY)
    return BUILD_DIR


def gpu_uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-{i:012x}"


def mig_uuid(i: int, j: int) -> str:
    return f"MIG-{i:04x}{j:04x}-aaaa-bbbb-cccc-{j:012x}"


def h200_state(count: int) -> dict[str, str]:
    """`count` idle H200s as the lent machine reports them: 700 W limit and default, 200-700 W range."""
    state = {"driver_version": "580.159.04", "nvml_version": "13.580.159.04", "count": str(count)}
    for i in range(count):
        for field, value in {
            "uuid": gpu_uuid(i),
            "name": "NVIDIA H200",
            "bus_id": f"00000000:{0x18 + i:02X}:00.0",
            "temp": 34 + i,
            "temp_slowdown": 89,
            "temp_shutdown": 95,
            "power_usage": 118_000 + i,
            "power_limit": 700_000,
            "default_limit": 700_000,
            "min_limit": 200_000,
            "max_limit": 700_000,
            "ecc_mode": 1,
            "mig_mode": 0,
            "serial": f"1654923{i:06d}",
            "board_part_number": "692-2G520-0280-000",
            "vbios": "96.00.AF.00.01",
        }.items():
            state[f"gpu.{i}.{field}"] = str(value)
        state[f"err.nvmlDeviceGetRetiredPages.{i}"] = "3"  # NOT_SUPPORTED, as on H100/H200
        state[f"err.nvmlDeviceGetRetiredPagesPendingStatus.{i}"] = "3"  # likewise
    return state


class FakeNvml:
    """The fake's state file: a flat key -> value mapping (see fakenvml.c for the keys)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, str]:
        state = {}
        for line in self.path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key:
                state[key] = value
        return state

    def write(self, state: dict[str, str]) -> None:
        tmp = self.path.with_suffix(".writing")
        tmp.write_text("".join(f"{k} {v}\n" for k, v in state.items()))
        os.replace(tmp, self.path)

    def set(self, key: str, value: object) -> None:
        state = self.read()
        state[key] = str(value)
        self.write(state)

    def get(self, key: str) -> str | None:
        return self.read().get(key)

    def nvml_event(self, gpu: int, xid: int) -> None:
        """Queue one Xid critical-error event of GPU `gpu` for the fake's event sets."""
        with self.path.with_name(self.path.name + ".events").open("a") as events:
            events.write(f"{gpu} {xid}\n")

    def calls(self, function: str) -> int:
        return int(self.read().get(f"calls.{function}", "0"))
