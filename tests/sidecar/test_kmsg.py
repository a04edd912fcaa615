"""Kernel log parsing: /dev/kmsg records, syslog and dmesg copies, Xid and SXid lines of several drivers."""

from __future__ import annotations

import json

import pytest

from remediator.sidecar.detector import nvml_bus_id
from remediator.sidecar.kmsg import (
    GpuKernelEvent,
    SxidEvent,
    XidEvent,
    bus_key,
    mentions_event,
    parse_event,
    parse_record,
)

# Shapes as the drivers print them (see the design notes' kernel-record facts).
XID_13 = (
    "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on "
    "(GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
)
XID_109 = (
    "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH "
    "TIMEOUT, Info 0x58005"
)
XID_79 = "NVRM: Xid (PCI:0000:01:00): 79, pid=2011, name=python3, GPU has fallen off the bus."
XID_79_OLD = "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."  # drivers before pid/name
SXID = "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout error"
SXID_NONFATAL = "nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Non-fatal, Link 12 LTSSM Fault Up"


def test_kmsg_record_fields() -> None:
    record = parse_record(f"4,1201,86472311,-;{XID_13}")
    assert record is not None
    assert record.sequence == 1201
    assert record.message == XID_13
    continued = parse_record(f"4,1202,86472312,c;{XID_109}\n")
    assert continued is not None and continued.sequence == 1202 and continued.message == XID_109
    # newer kernels append fields after the flags (caller id)
    caller = parse_record(f"4,1203,86472313,-,caller=T412;{XID_79}")
    assert caller is not None and caller.sequence == 1203 and caller.message == XID_79


def test_dictionary_and_continuation_lines_are_not_records() -> None:
    assert parse_record(" SUBSYSTEM=pci") is None
    assert parse_record(" DEVICE=+pci:0000:cb:00.0") is None
    assert parse_record("") is None


@pytest.mark.parametrize(
    "line",
    [
        f"Dec  3 10:00:01 gpu-node-1 kernel: [ 8647.231100] {XID_13}",
        f"2026-12-03T10:00:01.123456+00:00 gpu-node-1 kernel: {XID_13}",
        f"[ 8647.231100] {XID_13}",
    ],
)
def test_syslog_journal_and_dmesg_copies(line: str) -> None:
    record = parse_record(line)
    assert record is not None and record.sequence is None
    event = parse_event(record.message)
    assert isinstance(event, XidEvent) and event.xid == 13 and event.pci_bus_id == "0000:cb:00"


def test_xid_lines_of_several_drivers() -> None:
    event = parse_event(XID_13)
    assert event == XidEvent(
        pci_bus_id="0000:cb:00",
        xid=13,
        pid="<unknown>",
        process="<unknown>",
        text=XID_13.split("13, ", 1)[1],
    )
    event = parse_event(XID_109)
    assert isinstance(event, XidEvent) and (event.xid, event.pid, event.process) == (109, "1797828", "pt_main_thread")
    for line in (XID_79, XID_79_OLD):
        event = parse_event(line)
        assert isinstance(event, XidEvent) and event.xid == 79 and event.pci_bus_id == "0000:01:00"
    assert isinstance(parse_event(XID_79_OLD), XidEvent) and parse_event(XID_79_OLD).pid is None  # type: ignore[union-attr]


def test_sxid_lines() -> None:
    assert parse_event(SXID) == SxidEvent(
        pci_bus_id="0000:c3:00.0", sxid=24007, fatal=True, switch=0, text="Link 30 sourcetrack timeout error",
        link=30,
    )
    event = parse_event(SXID_NONFATAL)
    assert isinstance(event, SxidEvent) and event.fatal is False and event.switch == 3 and event.sxid == 20034


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: Xid (PCI:0000:cb:00): 1",  # cut short after the code: never read as Xid 1
        "NVRM: Xid (PCI:0000:cb:0",
        "NVRM: Xid (PCI:0000:cb:00): ",
        "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007",
        "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build",
        "NVRM: GPU at PCI:0000:cb:00: GPU-8e6a1c2d-0000-4000-8000-000000000001",
        "xhci_hcd 0000:00:14.0: Xid-like text that is not one",
        "",
    ],
)
def test_truncated_and_unknown_messages_are_no_events(message: str) -> None:
    assert parse_event(message) is None


def test_pci_addresses_match_across_widths_and_case() -> None:
    assert bus_key("0000:cb:00") == bus_key("00000000:CB:00.0") == bus_key("PCI:0000:CB:00") == (0, 0xCB, 0)
    assert bus_key("cb:00") == (0, 0xCB, 0)
    assert bus_key("0001:18:00.0") != bus_key("0000:18:00.0")
    assert bus_key("not:a:bus:id") is None
    assert bus_key("zz:00") is None
    assert nvml_bus_id((0, 0xCB, 0)) == "00000000:CB:00.0"


def test_kmsg_records_carry_their_facility() -> None:
    """PRIORITY = facility*8 + level: 4 and 3 are the kernel's; 12 (user.warning) is what a user-space write
    to /dev/kmsg gets by default, 30 (daemon.info) what systemd writes."""
    for priority, facility in ((4, 0), (3, 0), (6, 0), (12, 1), (14, 1), (30, 3)):
        record = parse_record(f"{priority},77,123,-;{XID_79}")
        assert record is not None and record.form == "kmsg"
        assert record.facility == facility and record.from_kernel is (facility == 0)


@pytest.mark.parametrize(
    ("fields", "from_kernel"),
    [
        ({"_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0"}, True),
        ({"_TRANSPORT": "kernel", "SYSLOG_FACILITY": "1"}, False),  # a user-space write to /dev/kmsg
        ({"_TRANSPORT": "syslog", "SYSLOG_FACILITY": "0"}, False),  # a client claiming LOG_KERN over /dev/log
        ({"_TRANSPORT": "journal", "SYSLOG_IDENTIFIER": "kernel"}, False),
        ({"_TRANSPORT": "stdout", "SYSLOG_FACILITY": "0"}, False),
        ({"_TRANSPORT": "kernel"}, False),
    ],
)
def test_journal_records_are_the_kernels_only_by_transport_and_facility(
    fields: dict[str, str], from_kernel: bool
) -> None:
    record = parse_record(json.dumps({"MESSAGE": XID_79, "__CURSOR": "s=1", **fields}))
    assert record is not None and record.form == "journal" and record.message == XID_79
    assert record.from_kernel is from_kernel


def test_journal_message_given_as_bytes() -> None:
    doc = {"MESSAGE": list(XID_79.encode()), "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0"}
    record = parse_record(json.dumps(doc))
    assert record is not None and record.from_kernel and record.message == XID_79


@pytest.mark.parametrize(
    "line",
    [
        f"Dec  3 10:00:01 gpu-node-1 kernel: [ 8647.231100] {XID_79}",  # `logger -t kernel` writes the same
        f"[ 8647.231100] {XID_79}",
        XID_79,
        '{"MESSAGE": "not closed',
    ],
)
def test_text_copies_prove_no_facility(line: str) -> None:
    record = parse_record(line)
    assert record is not None and record.facility is None and not record.from_kernel


@pytest.mark.parametrize(
    "message",
    [
        f'audit: type=1400 apparmor="DENIED" comm="{XID_79}"',  # a kernel message quoting a user's text
        f"usb 1-1: Product: {XID_79}",
        f" {XID_79}",
        f"x{SXID}",
        f"myapp[412]: kernel: {XID_79}",
    ],
)
def test_xid_text_inside_another_message_is_no_event(message: str) -> None:
    assert parse_event(message) is None
    assert mentions_event(message)


def test_syslog_tag_counts_only_in_the_header() -> None:
    record = parse_record(f"Dec  3 10:00:01 gpu-node-1 myapp[412]: kernel: {XID_79}")
    assert record is not None and record.form == "text"
    assert parse_event(record.message) is None


@pytest.mark.parametrize(
    "line",
    [
        f"[Sun Feb 23 16:24:18 2025] {XID_79}",  # dmesg --ctime
        f"[Fri Aug  9 13:32:56 2024] {XID_79}",
        f"[123] {XID_79}",
        f"[...] {XID_79}",
        f"kernel: {XID_79}",
        f"Apr 19 13:16:41 Kyrios kernel: {XID_79}",
    ],
)
def test_anchored_match_still_reads_every_copy_form(line: str) -> None:
    record = parse_record(line)
    assert record is not None
    event = parse_event(record.message)
    assert isinstance(event, XidEvent) and event.xid == 79


# -- the shapes without an Xid, MIG attribution and SXids without a severity word (siblings of the corpus) --


def test_mig_attributed_xids_keep_the_gpu_and_compute_instance() -> None:
    event = parse_event("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9).")
    assert isinstance(event, XidEvent)
    assert (event.pci_bus_id, event.xid, event.gpu_instance, event.compute_instance) == ("0000:01:00", 94, "5", None)
    event = parse_event("NVRM: Xid (PCI:0009:3b:00 GPU-I:13 GPU-CI:02): 13, pid=9, name=a, Graphics Exception")
    assert isinstance(event, XidEvent)
    assert (event.pci_bus_id, event.xid, event.gpu_instance, event.compute_instance) == ("0009:3b:00", 13, "13", "2")
    event = parse_event("NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9).")
    assert isinstance(event, XidEvent) and event.gpu_instance is None


@pytest.mark.parametrize(
    ("message", "kind", "bus", "detail"),
    [
        ("NVRM: GPU 0001:c1:00.0: GPU has fallen off the bus.", "fallen_off_bus", "0001:c1:00.0", ""),
        ("NVRM: The NVIDIA GPU 0000:b3:00.0\\x0a               NVRM: (PCI ID: 10de:2335) installed in this system "
         "has\\x0a               NVRM: fallen off the bus and is not responding to commands.",
         "fallen_off_bus", "0000:b3:00.0", ""),  # as /dev/kmsg hands the three-line printk out
        ("NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)", "gpu_init_failed", "0000:0a:00.0",
         "0x24:0x72:1568"),
        ("NVRM: GPU 0000:0a:00.0: RmInitAdapter failed!", "gpu_init_failed", "0000:0a:00.0", ""),
        ("NVRM: RmInitAdapter failed! (0x26:0xffff:1227)", "gpu_init_failed", None, "0x26:0xffff:1227"),
        ("NVRM: rm_init_adapter failed for device bearing minor number 0", "gpu_init_failed", None, ""),
        ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
         "returned from status @ kernel_channel.c:2874", "reset_required", None, "NV_ERR_RESET_REQUIRED"),
        ("NVRM: GPU 0000:3e:00.0: rcAndDisableOutstandingClientsWithImportedMemory: GPU in full chip reset "
         "[NV_ERR_GPU_IN_FULLCHIP_RESET]", "reset_required", "0000:3e:00.0", "NV_ERR_GPU_IN_FULLCHIP_RESET"),
        ("NVRM: knvlinkDiscoverPostRxDetLinks_GB100_REV2: Getting peer17 postRxDetLinkMask failed!",
         "nvlink_rx_detect", None, ""),
        ("NVRM: knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update Rx Detect Link mask!",
         "nvlink_rx_detect", None, ""),
        ("NVRM: knvlinkTrainLinksToActive: NVLink link training failed for link 3 (GPU 0000:18:00.0)",
         "nvlink_training_failed", "0000:18:00.0", ""),
    ],
)
def test_gpu_failures_without_an_xid(message: str, kind: str, bus: str | None, detail: str) -> None:
    event = parse_event(message)
    assert isinstance(event, GpuKernelEvent)
    assert (event.kind, event.pci_bus_id, event.detail) == (kind, bus, detail)
    assert mentions_event("nouveau: quoted " + message)  # counted as refused, not as an event, when quoted
    assert parse_event("nouveau: quoted " + message) is None


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: NVLink link training completed",
        "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1b06) installed in this system is not supported by the",
        "NVRM: The NVIDIA GPU 0000:b3:00.0",  # the first line of the three-line printk alone proves nothing
        "NVRM: GPU 0000:01:00.0: RmInitAdapter succeeded",
        "NVRM: nvAssertOkFailedNoLog: Assertion failed: Invalid state [NV_ERR_INVALID_STATE] (0x00000040)",
        "NVRM: GPU at PCI:0000:01:00: GPU-efbdfde9-5798-a6e7-4c46-12518fa15375",
        "nvidia-nvswitch0: SXid (PCI:0000:06:00.0): 20009, Non-fa",  # cut inside the severity word
        "nvidia-nvswitch0: SXid (PCI:0000:06:00.0): 20034, Link 48 LTSSM Fault Up",  # no severity, not an SOE code
        "nvidia-nvswitch0: SXid (PCI:0004:00:00.0): 26006, Data {0x10000000, 0x0}",  # the data line of a report
    ],
)
def test_lookalikes_of_the_new_shapes_are_no_events(message: str) -> None:
    assert parse_event(message) is None


def test_sxids_without_a_severity_word_and_their_link() -> None:
    event = parse_event("nvidia-nvswitch5: SXid (PCI:0007:c3:00.0): 26006, SOE HALTED")
    assert isinstance(event, SxidEvent)
    assert (event.sxid, event.fatal, event.switch, event.link, event.severity_stated) == (26006, True, 5, None, False)
    event = parse_event("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 26008, SOE Watchdog error")
    assert isinstance(event, SxidEvent) and (event.fatal, event.severity_stated) == (False, False)
    event = parse_event("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up")
    assert isinstance(event, SxidEvent) and (event.fatal, event.link) == (True, 48)
    event = parse_event("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Nonfatal, Link 04 RX Short Error Rate")
    assert isinstance(event, SxidEvent) and (event.fatal, event.link) == (False, 4)


def test_mentions_are_bounded_for_a_line_crafted_to_be_costly() -> None:
    message = "x NVRM: " * 8000 + "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus."
    assert mentions_event(message) is False  # the 8001st place is never looked at
    assert mentions_event("x " + message[-60:]) is True


@pytest.mark.parametrize(
    "line",
    [
        "4,1,2,-;msg", "4,1,2;msg", "4,1,2,c,1,-;m", "a,1,2,-;m", "4,,2,-;m", "4,1,2,-,x;y;z", "\uff14,1,2,-;m",
        "4,1,2,-", "4,1,2,-;", "+4,1,2,-;m", "4,1,2,-;line\nwith a newline", "4,1,2,;m", "4,1,2,-,;m", "4;1,2,3,-;m",
        "12,18446744073709551615,99999999999,-;x", "4,1,2,-\n;m", "4 ,1,2,-;m",
    ],
)
def test_the_kmsg_head_is_read_as_the_record_pattern_reads_it(line: str) -> None:
    from remediator.sidecar.kmsg import _KMSG, _kmsg_record

    found = _KMSG.match(line)
    expected = None if found is None else (int(found.group(2)), found.group(5), int(found.group(1)) >> 3)
    record = _kmsg_record(line)
    assert (None if record is None else (record.sequence, record.message, record.facility)) == expected
