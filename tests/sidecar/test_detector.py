"""The node detector in a real sidecar process: kernel log lines through a file or FIFO, NVML events, lost
GPUs and health gauges through the fake libnvidia-ml and the real pynvml bindings, read from /metrics."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.sidecar.conftest import AUTH, FakePod, SidecarEnv, running_env
from tests.sidecar.fakenvml import gpu_uuid

T = TypeVar("T")
XID = "gpu_remediator_xid_events_total"
NODE = "gpu-node-1"
GPU0 = {"Hostname": NODE, "UUID": gpu_uuid(0), "gpu": "0", "pci_bus_id": "00000000:18:00.0", "modelName": "NVIDIA H200"}
GPU1 = {"Hostname": NODE, "UUID": gpu_uuid(1), "gpu": "1", "pci_bus_id": "00000000:19:00.0", "modelName": "NVIDIA H200"}


def metrics(env: SidecarEnv) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(env.url + "/metrics", timeout=30).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(env: SidecarEnv, name: str, **labels: str) -> float:
    """Sum of the samples `name` carrying `labels` (0 when there is none)."""
    return sum(v for (n, ls), v in metrics(env).items() if n == name and set(labels.items()) <= ls)


def wait_for(check: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Kmsg:
    """Appends kernel records, numbered like /dev/kmsg numbers them, to the file the sidecar follows."""

    def __init__(self, path: Path, start: int = 1000) -> None:
        self.path = path
        self.sequence = start

    def record(self, message: str, priority: int = 4) -> str:
        self.sequence += 1
        return f"{priority},{self.sequence},{self.sequence * 1000},-;{message}\n"

    def write(self, *lines: str) -> None:
        with self.path.open("a") as fh:
            fh.write("".join(lines))


_sequences: dict[Path, Kmsg] = {}


def kmsg(env: SidecarEnv) -> Kmsg:
    return _sequences.setdefault(env.dir, Kmsg(env.dir / "kmsg"))


def xid13(bus: str = "0000:18:00") -> str:
    return (
        f"NVRM: Xid (PCI:{bus}): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on "
        "(GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
    )


def test_xid_and_sxid_lines_are_counted_with_the_gpu_labels(env: SidecarEnv) -> None:
    k = kmsg(env)
    before = {code: value(env, XID, xid=code) for code in ("13", "109", "79", "1")}
    k.write(
        k.record("pci 0000:18:00.0: [10de:2335] type 00 class 0x030200", 6),
        " SUBSYSTEM=pci\n",
        " DEVICE=+pci:0000:18:00.0\n",
        k.record(xid13("0000:18:00")),
        k.record("NVRM: Xid (PCI:0000:19:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
                 "errorString CTX SWITCH TIMEOUT, Info 0x58005"),
        k.record("eth0: Link is Up - 100Gbps/Full - flow control off", 6),
        k.record("NVRM: Xid (PCI:0000:19:00): 1"),  # truncated record: no Xid 1
        # an older driver's line, upper-case bus id, no pid/name
        k.record("NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus."),
        k.record("nvidia-nvswitch2: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout error"),
        k.record("nvidia-nvswitch2: SXid (PCI:0000:c3:00.0): 20034, Non-fatal, Link 12 LTSSM Fault Up"),
        k.record("\x00\xff garbage that is no record at all"),
        "not a kmsg record at all\n",
    )
    wait_for(lambda: value(env, XID, xid="79") > before["79"], "the Xid 79 to be counted")
    assert value(env, XID, **GPU0, xid="13") == before["13"] + 1
    assert value(env, XID, **GPU1, xid="109") == before["109"] + 1
    assert value(env, XID, **GPU1, xid="79") == before["79"] + 1
    assert value(env, XID, xid="1") == before["1"] == 0
    wait_for(lambda: value(env, "gpu_remediator_sxid_events_total", sxid="20034"), "the non-fatal SXid")
    assert value(
        env, "gpu_remediator_sxid_events_total", Hostname=NODE, pci_bus_id="00000000:C3:00.0", sxid="24007",
        fatal="true",
    ) >= 1
    assert value(env, "gpu_remediator_sxid_events_total", sxid="20034", fatal="false") >= 1
    assert value(env, "gpu_remediator_detector_source_up", source="kmsg") == 1


def test_the_same_xid_twice_is_two_events(env: SidecarEnv) -> None:
    k = kmsg(env)
    before = value(env, XID, **GPU0, xid="31")
    line = "NVRM: Xid (PCI:0000:18:00): 31, pid=4242, name=python3, Ch 00000010, intr 00000000. MMU Fault"
    k.write(k.record(line))
    wait_for(lambda: value(env, XID, **GPU0, xid="31") == before + 1, "the first Xid 31")
    k.write(k.record(line))
    wait_for(lambda: value(env, XID, **GPU0, xid="31") == before + 2, "the second Xid 31")


def test_nvml_event_and_kernel_line_of_one_xid_are_counted_once(env: SidecarEnv) -> None:
    wait_for(lambda: value(env, "gpu_remediator_detector_source_up", source="nvml_events"), "NVML events")
    k = kmsg(env)
    before = value(env, XID, **GPU1, xid="43")
    env.nvml.nvml_event(1, 43)
    wait_for(lambda: value(env, XID, **GPU1, xid="43") == before + 1, "the NVML event")
    # the kernel's copy of the same event arrives: still one. A marker record after it shows it was read.
    marker = value(env, XID, **GPU0, xid="13")
    k.write(k.record("NVRM: Xid (PCI:0000:19:00): 43, pid=977, name=train.py, Ch 00000008"), k.record(xid13()))
    wait_for(lambda: value(env, XID, **GPU0, xid="13") == marker + 1, "the marker record")
    assert value(env, XID, **GPU1, xid="43") == before + 1
    # a second event of the same code, from NVML again, is a second event
    env.nvml.nvml_event(1, 43)
    wait_for(lambda: value(env, XID, **GPU1, xid="43") == before + 2, "the second NVML event")


def test_lost_gpu_and_fewer_gpus_than_expected(env: SidecarEnv) -> None:
    lost = "gpu_remediator_gpu_lost"
    assert value(env, lost, UUID=gpu_uuid(1)) == 0
    assert value(env, "gpu_remediator_gpus_expected", Hostname=NODE) == 2
    env.nvml.set("gpu.1.lost", 1)  # NVML answers NVML_ERROR_GPU_IS_LOST for it
    assert value(env, lost, Hostname=NODE, UUID=gpu_uuid(1), gpu="1", pci_bus_id="00000000:19:00.0") == 1
    assert value(env, lost, UUID=gpu_uuid(0)) == 0
    assert value(env, "gpu_remediator_gpus_visible", Hostname=NODE) == 1
    env.nvml.set("gpu.1.lost", 0)
    env.nvml.set("gpu.1.removed", 1)  # no longer listed at all
    assert value(env, lost, UUID=gpu_uuid(1)) == 1
    assert value(env, "gpu_remediator_gpus_visible", Hostname=NODE) == 1
    assert value(env, "gpu_remediator_gpus_expected", Hostname=NODE) == 2
    env.nvml.set("gpu.1.removed", 0)
    assert value(env, lost, UUID=gpu_uuid(1)) == 0
    assert value(env, "gpu_remediator_gpus_visible", Hostname=NODE) == 2


def test_health_gauges_and_orphaned_memory(env: SidecarEnv) -> None:
    env.nvml.set("gpu.0.pcie.gen", 3)
    env.nvml.set("gpu.0.pcie.width", 8)
    env.nvml.set("gpu.0.field.230", 1)  # recovery action: GPU reset
    env.nvml.set("gpu.1.remap.pending", 1)
    env.nvml.set("gpu.1.remap.failure", 1)
    env.nvml.set("gpu.0.procs", "4242:3221225472")
    env.nvml.set("gpu.1.procs", "4343:1073741824")
    env.set_pods([FakePod("ml", "trainer-1", "uid-1", {"main": [gpu_uuid(1)]})])
    m = {name: value(env, f"gpu_remediator_{name}", **GPU0) for name in (
        "pcie_link_generation", "pcie_link_generation_max", "pcie_link_width", "pcie_link_width_max",
        "recovery_action", "temperature_slowdown_celsius", "temperature_shutdown_celsius", "orphaned_memory_bytes")}
    assert m == {
        "pcie_link_generation": 3, "pcie_link_generation_max": 5, "pcie_link_width": 8, "pcie_link_width_max": 16,
        "recovery_action": 1, "temperature_slowdown_celsius": 89, "temperature_shutdown_celsius": 95,
        "orphaned_memory_bytes": 3221225472,  # no pod holds GPU 0
    }
    assert value(env, "gpu_remediator_remapped_rows_pending", **GPU1) == 1
    assert value(env, "gpu_remediator_remapped_rows_failure", **GPU1) == 1
    assert value(env, "gpu_remediator_orphaned_memory_bytes", **GPU1) == 0  # held by trainer-1
    assert value(env, "gpu_remediator_recovery_action", **GPU1) == 0  # none
    env.nvml.set("gpu.1.recovery_action", "unsupported")  # a driver without the field
    assert ("gpu_remediator_recovery_action", frozenset(GPU1.items())) not in metrics(env)  # not reported
    # the kubelet unreachable: orphaned memory unknown, the series goes rather than lie
    env.kubelet.fail = True
    assert ("gpu_remediator_orphaned_memory_bytes", frozenset(GPU0.items())) not in metrics(env)


def test_the_readings_the_rules_fall_back_on(env: SidecarEnv) -> None:
    """The NVML readings the shipped rules read where dcgm-exporter runs its default counters file (ECC volatile
    counts, clock-event reasons, pending page retirement, power draw and limit), labelled like its series."""
    env.nvml.set("gpu.0.ecc.volatile.uncorrected", 2)
    env.nvml.set("gpu.0.ecc.volatile.corrected", 7)
    env.nvml.set("gpu.0.clock_events", 0x80 | 0x20)  # HW power brake and SW thermal
    env.nvml.set("gpu.0.power_usage", 690_500)
    env.nvml.set("gpu.0.power_limit", 700_000)
    m = {name: value(env, f"gpu_remediator_{name}", **GPU0) for name in (
        "ecc_uncorrected_volatile", "ecc_corrected_volatile", "clock_event_reasons", "power_usage_watts",
        "power_limit_watts")}
    assert m == {"ecc_uncorrected_volatile": 2, "ecc_corrected_volatile": 7, "clock_event_reasons": 0xA0,
                 "power_usage_watts": 690.5, "power_limit_watts": 700}
    # the H200 answers NOT_SUPPORTED for page retirement (it remaps rows): no series rather than a 0
    assert ("gpu_remediator_retired_pages_pending", frozenset(GPU0.items())) not in metrics(env)
    env.nvml.set("err.nvmlDeviceGetRetiredPagesPendingStatus.1", 0)
    env.nvml.set("gpu.1.retired_pending", 1)
    assert value(env, "gpu_remediator_retired_pages_pending", **GPU1) == 1


def nvlink_series(env: SidecarEnv) -> dict[tuple[str, str, str], float]:
    """(gpu, link, error) -> value of every gpu_remediator_nvlink_errors_total sample, checked to be a counter
    labelled like dcgm-exporter's series."""
    text = httpx.get(env.url + "/metrics", timeout=30).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    family = families["gpu_remediator_nvlink_errors"]
    assert family.type == "counter"
    found = {}
    for s in family.samples:
        assert s.name == "gpu_remediator_nvlink_errors_total"
        gpu = GPU0 if s.labels["gpu"] == "0" else GPU1
        assert {k: s.labels[k] for k in gpu} == gpu
        found[(s.labels["gpu"], s.labels["link"], s.labels["error"])] = s.value
    return found


def test_nvlink_error_counters_of_each_active_link(env: SidecarEnv) -> None:
    """The GPUNVLinkErrors fallback: NVML's per-link error counters as a counter family, active links only; a
    link that is down or NOT_SUPPORTED has no series, nor a counter the GPU does not keep, nor a GPU without
    NVLink."""
    assert nvlink_series(env) == {}  # the fake's default GPUs have no NVLink
    for key, v in {
        "gpu.0.nvlinks": 4,
        "gpu.0.nvlink.0.replay": 3, "gpu.0.nvlink.0.recovery": 1, "gpu.0.nvlink.0.crc_flit": 250,
        "gpu.0.nvlink.0.crc_data": 7,
        "gpu.0.nvlink.1.state": 0, "gpu.0.nvlink.1.replay": 99,  # down: not exported
        "gpu.0.nvlink.2.state": "unsupported",
        "gpu.0.nvlink.3.crc_data": "unsupported", "gpu.0.nvlink.3.recovery": 2,
    }.items():
        env.nvml.set(key, v)
    assert nvlink_series(env) == {
        ("0", "0", "replay"): 3, ("0", "0", "recovery"): 1, ("0", "0", "crc_flit"): 250, ("0", "0", "crc_data"): 7,
        ("0", "3", "replay"): 0, ("0", "3", "recovery"): 2, ("0", "3", "crc_flit"): 0,
    }
    env.nvml.set("gpu.0.nvlink.0.replay", 5)
    env.nvml.set("gpu.0.nvlink.0.state", 0)
    env.nvml.set("gpu.1.nvlinks", 1)
    env.nvml.set("gpu.1.nvlink.0.recovery", 4)
    assert nvlink_series(env) == {
        ("0", "3", "replay"): 0, ("0", "3", "recovery"): 2, ("0", "3", "crc_flit"): 0,
        ("1", "0", "replay"): 0, ("1", "0", "recovery"): 4, ("1", "0", "crc_flit"): 0, ("1", "0", "crc_data"): 0,
    }
    # a driver that keeps none of the counters (NOT_SUPPORTED for each): no series, and the GPU's other readings stay
    env.nvml.set("err.nvmlDeviceGetNvLinkErrorCounter.1", 3)
    assert {k for k in nvlink_series(env) if k[0] == "1"} == set()
    assert value(env, "gpu_remediator_power_limit_watts", **GPU1) == 700


def test_burst_of_20000_lines_through_a_fifo(tmp_path: Path, fake_nvml_dir: Path) -> None:
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    with running_env(tmp_path / "side", fake_nvml_dir, extra={"REMEDIATOR_KMSG_PATH": str(fifo)}) as env:
        k = Kmsg(fifo)
        lines = []
        for i in range(20_000):
            if i % 200 == 0:
                lines.append(k.record(xid13("0000:18:00") if i % 400 == 0 else
                                      "NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, An uncorrectable "
                                      "double bit error (DBE) has been detected on GPU in the framebuffer"))
            else:
                lines.append(k.record(f"audit: type=1400 audit({i}.000:1): apparmor=\"DENIED\" operation=\"open\""))
        writer = threading.Thread(target=lambda: Path(fifo).write_text("".join(lines)))
        writer.start()
        writer.join(60)
        wait_for(lambda: value(env, "gpu_remediator_kmsg_lines_total") >= 20_000, "all 20,000 lines", timeout=60)
        assert value(env, XID, **GPU0, xid="13") == 50
        assert value(env, XID, **GPU1, xid="48") == 50
        assert value(env, "gpu_remediator_detector_source_up", source="kmsg") == 1


def test_restart_skips_records_counted_before_and_a_reboot_starts_over(tmp_path: Path, fake_nvml_dir: Path) -> None:
    base = tmp_path / "side"
    with running_env(base, fake_nvml_dir) as env:
        k = Kmsg(base / "kmsg", start=500)
        k.write(k.record(xid13()), k.record(xid13()), k.record("usb 1-1: new device", 6))
        wait_for(lambda: value(env, XID, **GPU0, xid="13") == 2, "two Xid 13")
        wait_for(lambda: json.loads(env.state_file.read_text()).get("detector", {}).get("kmsg_sequence") == 503,
                 "the sequence number to be saved")
        env.sidecar.stop()
        env.sidecar.start()  # reads the same kernel log from its first record again
        k.write(k.record(xid13("0000:19:00")))
        wait_for(lambda: value(env, XID, **GPU1, xid="13") == 1, "the new record")
        assert value(env, XID, **GPU0, xid="13") == 0, "records handled before the restart were counted again"
        state = json.loads(env.state_file.read_text())["detector"]
        assert state["kmsg_sequence"] == 504
        assert sorted(state["inventory"]) == [gpu_uuid(0), gpu_uuid(1)]
        # a reboot: a new boot id and the kernel numbering from 0 again
        env.sidecar.stop()
        (base / "boot_id").write_text("3f0c2a1e-0000-4000-8000-000000000002\n")
        k = Kmsg(base / "kmsg", start=0)
        (base / "kmsg").write_text(k.record(xid13()))
        env.sidecar.start()
        wait_for(lambda: value(env, XID, **GPU0, xid="13") == 1, "the first Xid of the new boot")


def test_xid_lines_not_from_the_kernel_are_refused_and_counted(env: SidecarEnv) -> None:
    """A user-space write to /dev/kmsg (facility user), Xid text quoted inside a kernel message, syslog and
    journal lines forwarded from user space, and an over-long line ending in a forged record: none counts."""
    k = kmsg(env)
    refused = "remediator_sidecar_kernel_lines_refused_total"
    before = {reason: value(env, refused, reason=reason) for reason in ("facility", "unanchored", "oversize")}
    lost = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    marker = value(env, XID, **GPU0, xid="13")
    lost_before = value(env, XID, **GPU0, xid="79")
    k.sequence += 1
    forged_tail = f"4,{k.sequence},1,-;{lost}"
    k.write(
        k.record(lost, 12),  # `echo ... > /dev/kmsg`: user.warning
        k.record(lost, 14),
        k.record(f'audit: type=1400 apparmor="DENIED" operation="open" comm="{lost}"', 5),
        f"Dec  3 10:00:01 {NODE} kernel: {lost}\n",  # `logger -t kernel ...` as syslog forwards it
        json.dumps({"MESSAGE": lost, "_TRANSPORT": "syslog", "SYSLOG_FACILITY": "0"}) + "\n",
        "4,1,1,-;" + "A" * 80_000 + forged_tail + "\n",
        k.record(xid13()),  # a marker: the kernel's own Xid 13 still counts
    )
    wait_for(lambda: value(env, XID, **GPU0, xid="13") == marker + 1, "the marker record")
    wait_for(lambda: value(env, refused, reason="oversize") == before["oversize"] + 1, "the over-long line")
    assert value(env, XID, **GPU0, xid="79") == lost_before
    assert value(env, refused, reason="facility") == before["facility"] + 4
    assert value(env, refused, reason="unanchored") == before["unanchored"] + 1
    # the kernel's record as the journal exports it is accepted
    k.write(json.dumps({"MESSAGE": lost, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0"}) + "\n")
    wait_for(lambda: value(env, XID, **GPU0, xid="79") == lost_before + 1, "the journal's kernel record")


def test_a_gpu_whose_init_failed_fails_the_gate_until_a_reset_succeeds(env: SidecarEnv) -> None:
    """`RmInitAdapter failed` for GPU 1's address: its gate fails on `driver_init`, GPU 0's passes; the line and
    the kind are counted; after a reset of GPU 1 that succeeds the gate passes it again."""
    k = kmsg(env)
    k.write(k.record("NVRM: GPU 0000:19:00.0: RmInitAdapter failed! (0x62:0x65:1792)", 3))
    kind = "gpu_remediator_kernel_events_total"
    wait_for(lambda: value(env, kind, **GPU1, kind="gpu_init_failed"), "the init failure to be counted")
    with httpx.Client(base_url=env.url, headers=AUTH, timeout=30.0) as http:
        report = http.post(f"/v1/gpus/{gpu_uuid(1)}/validate").json()
        by_name = {c["name"]: c for c in report["checks"]}
        assert report["verdict"] == "fail" and report["failed"] == ["driver_init"]
        assert "RmInitAdapter failed! (0x62:0x65:1792)" in by_name["driver_init"]["detail"]
        other = http.post(f"/v1/gpus/{gpu_uuid(0)}/validate").json()
        assert {c["name"]: c["verdict"] for c in other["checks"]}["driver_init"] == "pass"
        assert http.post(f"/v1/gpus/{gpu_uuid(1)}/reset").json()["healthy"] is True
        again = http.post(f"/v1/gpus/{gpu_uuid(1)}/validate").json()
        assert again["verdict"] == "pass", again["failed"]
