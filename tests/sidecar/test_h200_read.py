"""scripts/h200_read.py, the read-only check run on a lent GPU, against the fake libnvidia-ml: it reads every
read-only method of `Nvml` (a getter added to the class without being added to the script fails here), the NVLink
counters link by link, the kernel-event kinds in a kernel log it only reads, and the holders of each GPU's device
file in a /proc tree, and it looks up no mutating NVML entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from remediator.sidecar.nvml import Nvml
from tests.sidecar.fakenvml import FakeNvml, h200_state

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "h200_read.py"
sys.path.insert(0, str(ROOT / "scripts"))

import h200_read  # noqa: E402


def test_the_script_covers_every_read_only_method_of_nvml() -> None:
    public = {name for name in dir(Nvml) if not name.startswith("_")}
    per_gpu = {key.split(".", 1)[0] for key in h200_read.getters(Nvml(), None)}  # type: ignore[arg-type]
    covered = per_gpu | set(h200_read.NODE_READS) | set(h200_read.EVENT_READS)
    assert covered | set(h200_read.NOT_CALLED) | set(h200_read.LIFECYCLE) == public
    assert not covered & set(h200_read.NOT_CALLED)


def fake_proc(root: Path) -> None:
    """pid 4242 nv-hostengine holding /dev/nvidia0, pid 4343 holding /dev/nvidiactl only, pid 4444 unrelated."""
    for pid, program, targets in ((4242, "/usr/bin/nv-hostengine", ["/dev/nvidia0", "/dev/nvidiactl"]),
                                  (4343, "python3", ["/dev/nvidiactl", "/dev/nvidia-uvm"]),
                                  (4444, "bash", ["/dev/pts/0"])):
        fd = root / str(pid) / "fd"
        fd.mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(program.encode() + b"\0")
        (root / str(pid) / "cgroup").write_text("0::/system.slice/x.service\n")
        for n, target in enumerate(targets):
            os.symlink(target, fd / str(n + 3))


def test_the_script_on_the_fake_nvml(tmp_path: Path, fake_nvml_dir: Path) -> None:
    nvml = FakeNvml(tmp_path / "nvml-state.txt")
    state = h200_state(2)
    state.update({"gpu.0.nvlinks": "2", "gpu.0.nvlink.1.state": "0", "gpu.0.nvlink.0.crc_flit": "12"})
    nvml.write(state)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(
        "3,1,10,-;NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, Graphics SM Warp Exception\n"
        "3,2,20,-;NVRM: GPU 0000:19:00.0: GPU has fallen off the bus.\n"
        "3,3,30,-;NVRM: RmInitAdapter failed! (0x25:0x65:1457)\n"
        "6,4,40,-;eth0: Link is Up\n"
    )
    before = kmsg.read_bytes()
    proc = tmp_path / "proc"
    fake_proc(proc)
    out_file = tmp_path / "read.json"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT),
           "LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(nvml.path)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--kmsg", str(kmsg), "--proc-root", str(proc), "--out", str(out_file)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out_file.read_text())
    assert report["blocked_mutations"] == []
    gpu0, gpu1 = report["gpus"]
    reads = gpu0["reads"]
    assert set(reads) == set(h200_read.getters(Nvml(), None))  # type: ignore[arg-type]
    assert reads["power_limit_mw"]["value"] == 700_000
    assert reads["retired_pages_pending"]["error"] == "NVML_ERROR_NOT_SUPPORTED"
    assert reads["nvlink_link_count"]["value"] == 2
    assert reads["nvlink_errors"]["value"] == {"0": {"replay": 0, "recovery": 0, "crc_flit": 12, "crc_data": 0}}
    links = gpu0["nvlink"]["links"]
    assert links["0"]["active"] is True and links["1"]["active"] is False
    assert links["2"] == {"active": {"error": "NVML_ERROR_INVALID_ARGUMENT"}}
    assert gpu1["reads"]["nvlink_errors"]["value"] == {}
    assert gpu1["nvlink"]["links"]["0"]["active"] == {"error": "NVML_ERROR_NOT_SUPPORTED"}
    assert report["node_health"]["gpus"][0]["nvlink_errors"] == reads["nvlink_errors"]["value"]
    k = report["kmsg"]
    assert k["readable"] is True and k["records"] == 4 and k["xid_events"] == 1
    assert k["kernel_event_kinds"] == {"fallen_off_bus": 1, "gpu_init_failed": 1, "reset_required": 0,
                                       "nvlink_rx_detect": 0, "nvlink_training_failed": 0}
    assert kmsg.read_bytes() == before
    holders = report["holders"]
    assert holders["pids_scanned"] == 3
    by_gpu = {g["index"]: {(h["pid"], h["kind"]) for h in g["holders"]} for g in holders["gpus"]}
    assert by_gpu == {0: {(4242, "dcgm-hostengine"), (4343, "process")}, 1: {(4343, "process")}}
