"""`Nvml.nvlink_errors` through the real pynvml bindings on the fake libnvidia-ml, in a child process (pynvml loads
the library once per process): which links it reads, which it skips, and how many NVML calls a GPU without NVLink
costs per read (each failed call is counted in remediator_sidecar_nvml_errors_total, so it must stay one or two)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.sidecar.fakenvml import FakeNvml, h200_state

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import collections, json, sys
from remediator.sidecar.nvml import Nvml, NvmlError
calls = collections.Counter()
errors = collections.Counter()
def observe(function, seconds, code):
    calls[function] += 1
    if code is not None:
        errors[(function, code)] += 1
nvml = Nvml(observe)
nvml.init()
out = {}
for index in range(nvml.device_count()):
    calls.clear(); errors.clear()
    try:
        read = {str(k): v for k, v in nvml.nvlink_errors(nvml.handle_by_index(index)).items()}
    except NvmlError as exc:
        read = {"error": exc.name}
    out[index] = {"read": read, "calls": dict(calls), "errors": {f"{f}:{c}": n for (f, c), n in errors.items()}}
print(json.dumps(out))
"""


def read_links(tmp_path: Path, lib_dir: Path, state: dict[str, str]) -> dict[str, Any]:
    nvml = FakeNvml(tmp_path / "nvml-state.txt")
    nvml.write(state)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT),
           "LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_STATE": str(nvml.path)}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_active_links_are_read_and_the_others_skipped(tmp_path: Path, fake_nvml_dir: Path) -> None:
    state = h200_state(2)
    state.update({
        "gpu.0.nvlinks": "18",
        "gpu.0.nvlink.0.replay": "3", "gpu.0.nvlink.0.crc_flit": "250",
        "gpu.0.nvlink.5.state": "0",
        "gpu.0.nvlink.6.state": "unsupported",
        "gpu.0.nvlink.7.crc_data": "unsupported",
    })
    out = read_links(tmp_path, fake_nvml_dir, state)
    gpu0 = out["0"]
    assert set(gpu0["read"]) == {str(link) for link in range(18)} - {"5", "6"}
    assert gpu0["read"]["0"] == {"replay": 3, "recovery": 0, "crc_flit": 250, "crc_data": 0}
    assert gpu0["read"]["7"] == {"replay": 0, "recovery": 0, "crc_flit": 0}
    # the link count came from NVML_FI_DEV_NVLINK_LINK_COUNT: no call for links 18..NVML_NVLINK_MAX_LINKS-1
    assert gpu0["calls"]["nvmlDeviceGetNvLinkState"] == 18
    assert gpu0["errors"] == {"nvmlDeviceGetNvLinkState:3": 1, "nvmlDeviceGetNvLinkErrorCounter:3": 1}
    # a GPU without NVLink: the link-count field and link 0's state answer NOT_SUPPORTED, nothing more is asked
    gpu1 = out["1"]
    assert gpu1["read"] == {}
    assert {f: n for f, n in gpu1["calls"].items() if "NvLink" in f} == {"nvmlDeviceGetNvLinkState": 1}
    assert gpu1["errors"] == {"nvmlDeviceGetFieldValues:3": 1, "nvmlDeviceGetNvLinkState:3": 1}


def test_without_the_link_count_field_every_link_up_to_the_maximum_is_tried(
    tmp_path: Path, fake_nvml_dir: Path
) -> None:
    """A driver that cannot tell the link count (field NOT_SUPPORTED): links are tried up to
    NVML_NVLINK_MAX_LINKS, links past the GPU's own answer INVALID_ARGUMENT and are skipped."""
    import pynvml

    state = h200_state(1)
    state.update({"gpu.0.nvlinks": "4", "gpu.0.nvlink.3.recovery": "9", "err.nvmlDeviceGetFieldValues": "3"})
    out = read_links(tmp_path, fake_nvml_dir, state)
    assert set(out["0"]["read"]) == {"0", "1", "2", "3"}
    assert out["0"]["read"]["3"]["recovery"] == 9
    assert out["0"]["calls"]["nvmlDeviceGetNvLinkState"] == pynvml.NVML_NVLINK_MAX_LINKS
