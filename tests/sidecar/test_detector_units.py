"""The node detector in-process: which kernel records it trusts, its bounded dedupe memory, and the kernel log
reader's handling of over-long lines (a real reader thread on a real file)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from remediator.sidecar.detector import MAX_DEDUPE_SERIES, MAX_PENDING_PER_SOURCE, Detector, DetectorConfig
from remediator.sidecar.kmsg_reader import _READ_SIZE, MAX_LINE, KmsgReader
from remediator.sidecar.metrics import SidecarMetrics
from remediator.sidecar.node_health import GpuRecord
from remediator.sidecar.nvml import XidNotice

XID_79 = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


GPU = GpuRecord(0, "GPU-1", "00000000:18:00.0", "NVIDIA H200")


def make(tmp_path: Path, clock: Clock | None = None) -> tuple[Detector, SidecarMetrics]:
    """A detector whose NVML knows one GPU, GPU-1 at 0000:18:00 (the kernel's lines for it carry its UUID)."""
    (tmp_path / "boot_id").write_text("boot-1\n")
    metrics = SidecarMetrics()
    config = DetectorConfig("node-1", tmp_path / "state.json", tmp_path / "boot_id", dedupe_seconds=10.0)

    def lookup(bus: str) -> GpuRecord | None:
        return GPU if bus == GPU.pci_bus_id else None

    return Detector(config, metrics, lookup_bus=lookup, clock=clock or Clock()), metrics


def xids(metrics: SidecarMetrics, xid: str) -> float:
    return sum(
        s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "gpu_remediator_xid_events_total" and s.labels.get("xid") == xid
    )


def refused(metrics: SidecarMetrics, reason: str) -> float:
    value = metrics.registry.get_sample_value("remediator_sidecar_kernel_lines_refused_total", {"reason": reason})
    assert value is not None
    return value


def xid_line(bus: int, code: int) -> str:
    """An Xid of the GPU at PCI bus `bus` (0-255), device 0."""
    return f"NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, pid=1, name=x, text"


class Kernel:
    """Numbers kernel records like /dev/kmsg does."""

    def __init__(self, detector: Detector) -> None:
        self.detector = detector
        self.sequence = 0

    def __call__(self, message: str, priority: int = 4) -> None:
        self.sequence += 1
        self.detector.handle_line(f"{priority},{self.sequence},{self.sequence},-;{message}")


def test_only_kernel_records_starting_with_the_driver_prefix_count(tmp_path: Path) -> None:
    detector, metrics = make(tmp_path)
    spoofed = [
        f"12,1,10,-;{XID_79}",  # user-space write to /dev/kmsg: facility 1 (user)
        f"14,2,20,-;{XID_79}",
        f"30,3,30,-;{XID_79}",  # facility 3 (daemon), as systemd writes
        f"Dec  3 10:00:01 node-1 kernel: {XID_79}",  # syslog copy: `logger -t kernel` writes the same
        f"[  12.5] {XID_79}",  # dmesg text: carries no facility
        json.dumps({"MESSAGE": XID_79, "_TRANSPORT": "syslog", "SYSLOG_FACILITY": "0"}),
        json.dumps({"MESSAGE": XID_79, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "1"}),
    ]
    embedded = [
        f'5,4,40,-;audit: type=1400 apparmor="DENIED" comm="{XID_79}"',  # the kernel quoting a user's text
        f"6,5,50,-;usb 1-1: Product: {XID_79}",
    ]
    for line in (*spoofed, *embedded, "6,6,60,-;eth0: Link is Up", "12,7,70,-;ordinary user text"):
        detector.handle_line(line)
    assert xids(metrics, "79") == 0
    assert refused(metrics, "facility") == len(spoofed)
    assert refused(metrics, "unanchored") == len(embedded)
    assert refused(metrics, "oversize") == 0
    assert detector.kmsg_sequence == 7  # every kmsg record moves the sequence on, refused or not
    detector.handle_line(f"4,8,80,-;{XID_79}")
    detector.handle_line(json.dumps({"MESSAGE": XID_79, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0"}))
    assert xids(metrics, "79") == 2


def test_dedupe_memory_is_bounded_and_still_dedupes(tmp_path: Path) -> None:
    clock = Clock()
    detector, metrics = make(tmp_path, clock)
    kernel = Kernel(detector)
    for bus in range(1, 201):  # 20,000 distinct (GPU, Xid) series within one dedupe window
        for code in range(1, 101):
            kernel(xid_line(bus, code))
    assert xids(metrics, "1") == 200
    assert detector.dedupe_pairs == MAX_DEDUPE_SERIES
    # the most recent pairs are still matched across sources: one event, counted once
    clock.now += 1
    kernel(xid_line(0x18, 13))
    detector.handle_nvml(XidNotice(GPU.uuid, 13))
    assert xids(metrics, "13") == 200 + 1
    assert detector.dedupe_pairs == MAX_DEDUPE_SERIES
    # once the window has passed every pair is forgotten
    clock.now += 10.5
    kernel(xid_line(7, 7))
    assert detector.dedupe_pairs == 1


def test_one_event_from_both_sources_counts_once_and_old_reports_expire(tmp_path: Path) -> None:
    clock = Clock()
    detector, metrics = make(tmp_path, clock)
    kernel = Kernel(detector)
    detector.handle_nvml(XidNotice(GPU.uuid, 43))  # unknown to the inventory yet: keyed by the UUID alone
    detector.handle_nvml(XidNotice(GPU.uuid, 43))
    assert xids(metrics, "43") == 2
    kernel(xid_line(0x18, 43))  # the kernel's copies of both
    kernel(xid_line(0x18, 43))
    assert xids(metrics, "43") == 2
    kernel(xid_line(0x18, 43))  # a third: a new event
    assert xids(metrics, "43") == 3
    clock.now += 10.5  # past the window: the NVML copy of the third comes too late to be matched
    detector.handle_nvml(XidNotice(GPU.uuid, 43))
    assert xids(metrics, "43") == 4
    # a storm of one pair from one source keeps at most MAX_PENDING_PER_SOURCE unmatched reports
    for _ in range(MAX_PENDING_PER_SOURCE * 3):
        detector.handle_nvml(XidNotice(GPU.uuid, 31))
    assert xids(metrics, "31") == MAX_PENDING_PER_SOURCE * 3
    for _ in range(MAX_PENDING_PER_SOURCE * 3):
        kernel(xid_line(0x18, 31))
    assert xids(metrics, "31") == MAX_PENDING_PER_SOURCE * 3 + MAX_PENDING_PER_SOURCE * 2


def read_with_reader(path: Path, last: str) -> tuple[list[str], list[int]]:
    lines: list[str] = []
    oversize: list[int] = []
    seen = threading.Event()

    def handle(line: str) -> None:
        lines.append(line)
        if line == last:
            seen.set()

    reader = KmsgReader(path, handle, lambda: None, on_oversize=oversize.append, poll_seconds=0.05)
    reader.start()
    try:
        assert seen.wait(30), f"the reader never reached the last line; read {len(lines)}"
    finally:
        reader.stop()
    return lines, oversize


@pytest.mark.parametrize("long_size", [MAX_LINE + _READ_SIZE, MAX_LINE + 1, 3 * MAX_LINE + 17])
def test_an_over_long_line_is_discarded_to_its_end(tmp_path: Path, long_size: int) -> None:
    """The tail of an over-long line is never a record: here it is a forged kernel Xid record."""
    forged = f"4,2,2,-;{XID_79}"
    marker = f"4,3,3,-;{XID_79.replace('79', '13', 1)}"
    path = tmp_path / "kmsg"
    path.write_bytes(
        b"4,1,1,-;first\n" + b"A" * long_size + forged.encode() + b"\n" + marker.encode() + b"\n"
    )
    lines, oversize = read_with_reader(path, marker)
    assert lines == ["4,1,1,-;first", marker]
    assert len(oversize) == 1 and oversize[0] > MAX_LINE


def test_an_over_long_line_written_in_pieces_is_discarded_to_its_end(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_bytes(b"")
    marker = "4,9,9,-;done"
    lines: list[str] = []
    oversize: list[int] = []
    reader = KmsgReader(path, lines.append, lambda: None, on_oversize=oversize.append, poll_seconds=0.02)
    reader.start()
    try:
        with path.open("ab") as fh:
            for _ in range(6):  # 96 KiB of one line, the reader catching up between the writes
                fh.write(b"B" * 16384)
                fh.flush()
                time.sleep(0.05)
            fh.write(f"4,2,2,-;{XID_79}\n{marker}\n".encode())
        deadline = time.monotonic() + 30
        while marker not in lines and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        reader.stop()
    assert lines == [marker]
    assert len(oversize) == 1


FALLEN = "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus."


def kernel_events(metrics: SidecarMetrics, kind: str) -> dict[str, float]:
    return {
        s.labels["UUID"]: s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "gpu_remediator_kernel_events_total" and s.labels["kind"] == kind
    }


def test_a_gpu_lost_without_an_xid_counts_as_xid_79_once_beside_the_xid_line(tmp_path: Path) -> None:
    clock = Clock()
    detector, metrics = make(tmp_path, clock)
    kernel = Kernel(detector)
    kernel(FALLEN)  # a newer driver: no Xid line at all
    assert xids(metrics, "79") == 1
    assert kernel_events(metrics, "fallen_off_bus") == {"GPU-1": 1}
    clock.now += 60
    kernel(XID_79)  # an older driver: the Xid line and the fallen-off line of the same loss
    kernel(FALLEN)
    assert xids(metrics, "79") == 2
    assert kernel_events(metrics, "fallen_off_bus") == {"GPU-1": 2}


def test_a_mig_xid_carries_its_gpu_instance(tmp_path: Path) -> None:
    detector, metrics = make(tmp_path)
    Kernel(detector)("NVRM: Xid (PCI:0000:18:00 GPU-I:05 GPU-CI:01): 94, pid=7194, Contained: CE User Channel")
    (labels,) = [s.labels for family in metrics.registry.collect() for s in family.samples
                 if s.name == "gpu_remediator_xid_events_total"]
    assert (labels["UUID"], labels["xid"], labels["gpu_instance"], labels["compute_instance"]) == (
        "GPU-1", "94", "5", "1")


def test_an_init_failure_is_remembered_for_the_boot_until_a_reset_succeeds(tmp_path: Path) -> None:
    detector, metrics = make(tmp_path)
    Kernel(detector)("NVRM: GPU 0000:18:00.0: RmInitAdapter failed! (0x62:0x65:1792)", 3)
    detector.end_batch()  # as the reader does after each batch
    assert kernel_events(metrics, "gpu_init_failed") == {"GPU-1": 1}
    assert "RmInitAdapter failed! (0x62:0x65:1792)" in (detector.init_failure("GPU-1") or "")
    assert detector.init_failure("GPU-2") is None
    again, _ = make(tmp_path)  # a restart in the same boot: the record is not read again, the failure stays
    assert again.init_failure("GPU-1") is not None
    again.reset_succeeded("GPU-1")
    assert again.init_failure("GPU-1") is None
    assert make(tmp_path)[0].init_failure("GPU-1") is None  # the reset is persisted too
    Kernel(again)("NVRM: GPU 0000:18:00.0: RmInitAdapter failed! (0x62:0x65:1792)", 3)
    (tmp_path / "boot_id").write_text("boot-2\n")
    config = DetectorConfig("node-1", tmp_path / "state.json", tmp_path / "boot_id")
    assert Detector(config, SidecarMetrics()).init_failure("GPU-1") is None  # a new boot starts clean


def test_an_init_failure_from_the_journal_is_persisted_by_the_batch_end(tmp_path: Path) -> None:
    """Journal records carry no sequence number: the failure alone must still reach the state file."""
    detector, _ = make(tmp_path)
    detector.handle_line(json.dumps({"MESSAGE": "NVRM: GPU 0000:18:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
                                     "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0"}))
    detector.end_batch()
    assert make(tmp_path)[0].init_failure("GPU-1") is not None


def test_failures_naming_no_gpu_are_counted_for_the_node(tmp_path: Path) -> None:
    detector, metrics = make(tmp_path)
    kernel = Kernel(detector)
    kernel("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062)")
    kernel("NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!")
    assert kernel_events(metrics, "reset_required") == {"": 1}
    assert kernel_events(metrics, "nvlink_rx_detect") == {"": 1}
    assert xids(metrics, "79") == 0


def xid_actions(metrics: SidecarMetrics, xid: str) -> dict[str, float]:
    """xid_action label -> count, for one code."""
    found: dict[str, float] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == "gpu_remediator_xid_events_total" and s.labels.get("xid") == xid:
                found[s.labels["xid_action"]] = found.get(s.labels["xid_action"], 0.0) + s.value
    return found


@pytest.mark.parametrize(
    ("line", "xid", "action"),
    [
        # the corpus' Xid 45 after Xid 149: follow the other Xid
        ("NVRM: Xid (PCI:0000:18:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
         "45", "IGNORE"),
        ("NVRM: Xid (PCI:0000:18:00): 45, pid=1818990, name=python3, Ch 00000008", "45", "RESTART_FM"),
        ("NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot "
         "Required)", "154", "RESTART_BM"),
        ("NVRM: Xid (PCI:0000:18:00): 74, pid=1, name=x, NVLink: fatal error detected on link 14(0x100, 0x0, 0x0, "
         "0x0, 0x0, 0x0, 0x0)", "74", "CHECK_MECHANICALS"),
        ("NVRM: Xid (PCI:0000:18:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 13 (0x00000106 0x00000040 0x00000000 "
         "0x00000000 0x00000000 0x00000000)", "145", "RESET_GPU"),
        ("NVRM: Xid (PCI:0000:18:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 1 (0x00000226 0x00000002)", "149",
         "IGNORE"),
        ("NVRM: Xid (PCI:0000:18:00): 74, pid=1, name=x, NVLink: fatal error detected on link 14", "74", ""),
        ("NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, Graphics Exception", "13", ""),
    ],
)
def test_each_xid_line_carries_nvidias_decode_as_xid_action(tmp_path: Path, line: str, xid: str, action: str) -> None:
    from remediator.domain.xid_decode import decoded_action

    detector, metrics = make(tmp_path)
    Kernel(detector)(line)
    assert xid_actions(metrics, xid) == {action: 1.0}
    assert (decoded_action(int(xid), line.split(f": {xid}, ", 1)[1]) or "") == action, "the controller's decode"


def test_an_nvml_report_of_a_decoded_code_waits_for_its_kernel_line(tmp_path: Path) -> None:
    clock = Clock()
    detector, metrics = make(tmp_path, clock)
    kernel = Kernel(detector)
    line = "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    # NVML first (it usually is): nothing counted yet; the kernel line within the window is the same event
    detector.handle_nvml(XidNotice(GPU.uuid, 154))
    assert xid_actions(metrics, "154") == {}
    clock.now += 3
    kernel(line)
    assert xid_actions(metrics, "154") == {"RESET_GPU": 1.0}
    clock.now += 30
    detector.flush_waiting()
    assert xid_actions(metrics, "154") == {"RESET_GPU": 1.0}, "the NVML report was that event, not a second"
    # an NVML report no kernel line follows (the kernel log lost it): counted without a decode after the window
    detector.handle_nvml(XidNotice(GPU.uuid, 154))
    clock.now += 5
    detector.flush_waiting()
    assert xid_actions(metrics, "154") == {"RESET_GPU": 1.0}
    clock.now += 6
    detector.flush_waiting()
    assert xid_actions(metrics, "154") == {"RESET_GPU": 1.0, "": 1.0}
    # the kernel line first, NVML after it: still one event (the dedupe across sources)
    clock.now += 30
    kernel(line)
    detector.handle_nvml(XidNotice(GPU.uuid, 154))
    clock.now += 30
    detector.flush_waiting()
    assert xid_actions(metrics, "154") == {"RESET_GPU": 2.0, "": 1.0}
    # other codes are counted at once from NVML, without a decode
    detector.handle_nvml(XidNotice(GPU.uuid, 13))
    assert xid_actions(metrics, "13") == {"": 1.0}


def test_waiting_nvml_reports_are_bounded(tmp_path: Path) -> None:
    detector, metrics = make(tmp_path)
    for _ in range(MAX_DEDUPE_SERIES + 5):
        detector.handle_nvml(XidNotice(GPU.uuid, 74))
    assert xid_actions(metrics, "74") == {"": 5.0}, "the oldest are counted when more arrive"
    assert len(detector._waiting) == MAX_DEDUPE_SERIES
