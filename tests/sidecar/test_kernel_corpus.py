"""The kernel log parser and the node detector against real kernel lines (`data/kernel-log-lines.jsonl`).

Each corpus line was printed by a real driver and is quoted from a public bug report or vendor document (its
`source`); its `expected_*` fields say what it reports. Every line is checked as given, then in siblings a
fleet prints too: the GPU on other PCI domains/buses/devices, other PIDs, other timestamps, and each message
as the kernel's own /dev/kmsg record and journal record fed through the detector, which must count exactly
the expected event (and nothing for the lines that report none).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from remediator.sidecar.detector import Detector, DetectorConfig
from remediator.sidecar.kmsg import GpuKernelEvent, SxidEvent, XidEvent, bus_key, parse_event, parse_record
from remediator.sidecar.metrics import SidecarMetrics

CORPUS = Path(__file__).resolve().parent / "data" / "kernel-log-lines.jsonl"
ENTRIES: list[dict[str, Any]] = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
KINDS = {"xid", "sxid", "none", "fallen_off_bus", "gpu_init_failed", "reset_required", "nvlink_rx_detect"}
# Other places a GPU or switch sits: another domain (GB200 and multi-socket hosts), a high bus, a VM's device.
BUSES = ["0000:c1:00", "0001:01:00", "0009:b3:00", "0018:3e:1c", "000a:ff:1f"]
PIDS = ["1", "4194304", "77"]
STAMPS = [
    (re.compile(r"^\[\s*\d+\.\d+\]"), ["[    0.000001]", "[99999999.999999]"]),
    (re.compile(r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]"),
     ["[Thu Jan  1 00:00:00 2026]", "[Tue Dec 31 23:59:59 2030]"]),
    (re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d"), ["Jan  1 00:00:00", "Dec 31 23:59:59"]),
    (re.compile(r"^\d+,\d+,\d+,"), ["4,1,0,", "4,18446744073709551615,99999999999,"]),
]
_PCI = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?=[.):\s]|$)")


def ids(entry: dict[str, Any]) -> str:
    return f"{ENTRIES.index(entry)}-{entry['expected_kind']}-{entry['expected_code']}"


def test_the_corpus_is_whole() -> None:
    """The copy in the tests is the whole corpus, sources included, every kind of it covered here."""
    assert len(ENTRIES) == 53
    assert all(entry["source"] and entry["line"] for entry in ENTRIES)
    assert {entry["expected_kind"] for entry in ENTRIES} == KINDS


def check(entry: dict[str, Any], line: str, pci: str | None) -> XidEvent | SxidEvent | GpuKernelEvent | None:
    """Parse `line` as a kernel record and assert the event `entry` expects, at `pci`."""
    record = parse_record(line)
    assert record is not None
    event = parse_event(record.message)
    kind = entry["expected_kind"]
    if kind == "none":
        assert event is None, line
        return None
    if kind == "xid":
        assert isinstance(event, XidEvent), line
        assert event.xid == entry["expected_code"]
        assert event.pci_bus_id == pci
    elif kind == "sxid":
        assert isinstance(event, SxidEvent), line
        assert (event.sxid, event.fatal) == (entry["expected_code"], entry["expected_fatal"])
        assert event.pci_bus_id == pci
    else:
        assert isinstance(event, GpuKernelEvent), line
        assert event.kind == kind
        assert event.pci_bus_id == pci
    return event


@pytest.mark.parametrize("entry", ENTRIES, ids=ids)
def test_every_corpus_line(entry: dict[str, Any]) -> None:
    check(entry, entry["line"], entry["expected_pci"])


def other_bus(line: str, pci: str, bus: str) -> tuple[str, str]:
    """`line` with the GPU at `bus` instead of `pci` (function and width kept), and the new expected address."""
    old = pci.split(".", 1)[0]
    new_pci = bus + pci[len(old):]
    return line.replace(old, bus), new_pci


@pytest.mark.parametrize("bus", BUSES)
@pytest.mark.parametrize("entry", ENTRIES, ids=ids)
def test_every_line_on_other_buses(entry: dict[str, Any], bus: str) -> None:
    pci = entry["expected_pci"]
    if pci is None:  # the line names no GPU it reports on; move any address it does name, still no event
        line = _PCI.sub(bus, entry["line"])
        check(entry, line, None)
        return
    if pci.lower().startswith(bus):
        bus = "0002:02:02"
    line, new_pci = other_bus(entry["line"], pci, bus)
    assert line != entry["line"]
    check(entry, line, new_pci)
    upper, upper_pci = other_bus(entry["line"], pci, bus.upper())  # some drivers and tools print capitals
    check(entry, upper, upper_pci)


@pytest.mark.parametrize("pid", PIDS)
@pytest.mark.parametrize("entry", [e for e in ENTRIES if re.search(r"pid=\d+", e["line"])], ids=ids)
def test_every_line_with_other_pids(entry: dict[str, Any], pid: str) -> None:
    line = re.sub(r"pid=\d+", f"pid={pid}", entry["line"])
    event = check(entry, line, entry["expected_pci"])
    assert isinstance(event, XidEvent) and event.pid == pid


@pytest.mark.parametrize("stamp", [0, 1])
@pytest.mark.parametrize("entry", ENTRIES, ids=ids)
def test_every_line_with_other_timestamps(entry: dict[str, Any], stamp: int) -> None:
    for pattern, stamps in STAMPS:
        if pattern.match(entry["line"]):
            line = pattern.sub(stamps[stamp], entry["line"], count=1)
            assert line != entry["line"]
            check(entry, line, entry["expected_pci"])
            return
    # No stamp (a bare message or "kernel: ..."): the same message under each stamp a reader meets.
    message = parse_record(entry["line"]).message  # type: ignore[union-attr]
    for line in (f"[{1 + stamp * 86399}.000042] {message}", f"[Sat Dec  {5 + stamp} 11:00:0{stamp} 2026] {message}"):
        check(entry, line, entry["expected_pci"])


# ------------------------------------------------------------------------------------------ through the detector


def kmsg(message: str, sequence: int) -> str:
    """`message` as /dev/kmsg hands out a kernel record (facility 0, level 4): newlines escaped as \\x0a."""
    return f"4,{sequence},{sequence * 1000},-;" + message.replace("\\", "\\x5c").replace("\n", "\\x0a")


def journal(message: str) -> str:
    return json.dumps({"MESSAGE": message, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0", "PRIORITY": "4"})


def counted(metrics: SidecarMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name in ("gpu_remediator_xid_events_total", "gpu_remediator_sxid_events_total",
                      "gpu_remediator_kernel_events_total") and s.value
    }


def detector(tmp_path: Path) -> tuple[Detector, SidecarMetrics]:
    (tmp_path / "boot_id").write_text("boot-1\n")
    metrics = SidecarMetrics()
    config = DetectorConfig("node-1", tmp_path / "state.json", tmp_path / "boot_id")
    return Detector(config, metrics), metrics


@pytest.mark.parametrize("form", ["kmsg", "journal"])
@pytest.mark.parametrize("entry", ENTRIES, ids=ids)
def test_the_detector_counts_each_line_once_as_expected(tmp_path: Path, entry: dict[str, Any], form: str) -> None:
    record = parse_record(entry["line"])
    assert record is not None
    line = kmsg(record.message, 7) if form == "kmsg" else journal(record.message)
    found, metrics = detector(tmp_path)
    found.handle_line(line)
    series = counted(metrics)
    kind = entry["expected_kind"]
    if kind == "none":
        assert series == {}
        return
    key = bus_key(entry["expected_pci"]) if entry["expected_pci"] else None
    bus = f"{key[0]:08X}:{key[1]:02X}:{key[2]:02X}.0" if key else ""
    if kind == "xid":
        ((name, labels), _), = series.items()
        assert name == "gpu_remediator_xid_events_total"
        assert (dict(labels)["xid"], dict(labels)["pci_bus_id"]) == (str(entry["expected_code"]), bus)
    elif kind == "sxid":
        ((name, labels), _), = series.items()
        assert name == "gpu_remediator_sxid_events_total"
        assert dict(labels)["sxid"] == str(entry["expected_code"])
        assert dict(labels)["fatal"] == ("true" if entry["expected_fatal"] else "false")
        assert dict(labels)["pci_bus_id"] == bus
    else:
        events = {dict(labels)["kind"]: dict(labels) for name, labels in series
                  if name == "gpu_remediator_kernel_events_total"}
        assert list(events) == [kind]
        assert events[kind]["pci_bus_id"] == bus
        xids = [dict(labels) for name, labels in series if name == "gpu_remediator_xid_events_total"]
        if kind == "fallen_off_bus":  # the same series, so the same alert, as Xid 79
            assert [(x["xid"], x["pci_bus_id"]) for x in xids] == [("79", bus)]
        else:
            assert xids == []
    assert all(value == 1 for value in series.values())


@pytest.mark.parametrize("entry", ENTRIES, ids=ids)
def test_a_line_written_from_user_space_counts_nothing(tmp_path: Path, entry: dict[str, Any]) -> None:
    """The same text with the user facility (what `echo ... > /dev/kmsg` gives) is refused, whatever its kind."""
    record = parse_record(entry["line"])
    assert record is not None
    found, metrics = detector(tmp_path)
    found.handle_line("12" + kmsg(record.message, 9)[1:])  # priority 12: facility 1 (user), level 4
    assert counted(metrics) == {}
    refused = metrics.registry.get_sample_value("remediator_sidecar_kernel_lines_refused_total",
                                                {"reason": "facility"})
    assert refused == (0 if entry["expected_kind"] == "none" else 1)
