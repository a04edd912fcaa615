"""Kernel log records and the GPU errors the NVIDIA drivers write into them, parsed without I/O.

The GPU driver reports every Xid as a kernel message (`NVRM: Xid (PCI:0000:cb:00): 13, pid=..., ...`) and
the NVSwitch driver every SXid (`nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, ...`). This is
the one source that still speaks when NVML and DCGM cannot (Xid 79: the GPU fell off the bus). Records
come as `/dev/kmsg` gives them (`PRIORITY,SEQUENCE,TIMESTAMP_US,FLAGS;MESSAGE`, dictionary lines after
it start with a space), as journal records (`journalctl -o json`), or as syslog/dmesg text copies
(`... kernel: [123.456] MESSAGE`). Anything else, a truncated line included, parses to None: an unknown
line is never an error.

Who wrote a record matters: any process that can open /dev/kmsg for writing (root on the node, a
privileged pod) can add a record saying `NVRM: Xid ... 79`, and a kernel message can quote text a user
chose (a process or device name). So a record says which syslog facility it came from where its form can
prove it (`KernelRecord.facility`): the kmsg PRIORITY is facility*8+level, and the kernel gives every
record written from user space facility 1 (user) or the one the writer asked for, never 0 (kernel); a
journal record is the kernel's only with `_TRANSPORT=kernel` and `SYSLOG_FACILITY=0`. Syslog and dmesg text
carry no facility at all (`logger -t kernel` writes `host kernel: ...`), so they prove nothing. And an event
is read only from a message that *starts* with the driver's prefix (`parse_event`), as the driver prints it;
`mentions_event` finds the same text anywhere, to count what was refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = [
    "KERNEL_FACILITY",
    "KernelRecord",
    "SxidEvent",
    "XidEvent",
    "bus_key",
    "mentions_event",
    "parse_event",
    "parse_record",
]

# PRIORITY,SEQUENCE,TIMESTAMP_US,FLAGS[,more fields];MESSAGE  (Documentation/ABI/testing/dev-kmsg)
_KMSG = re.compile(r"^(\d+),(\d+),(\d+),([^;,]*)(?:,[^;]*)?;(.*)$", re.DOTALL)
# "Dec  3 10:00:00 host kernel: [  123.456789] MESSAGE", "2026-12-03T10:00:01+00:00 host kernel: MESSAGE" or
# "kernel: MESSAGE" (journalctl -k short forms): the tag right after the header, never "kernel:" mid-line
_SYSLOG = re.compile(
    r"^(?:(?:[A-Z][a-z]{2}\s+\d{1,2}\s+\d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+)\s+\S+\s+)?"
    r"kernel:\s*(?:\[\s*\d+\.\d+\]\s*)?(.*)$",
    re.DOTALL,
)
# "[  123.456789] MESSAGE" (dmesg), "[Sun Feb 23 16:24:18 2025] MESSAGE" (dmesg --ctime), "[123] MESSAGE"
# or "[...] MESSAGE" (a stamp shortened or elided, as vendor documents quote lines)
_DMESG = re.compile(
    r"^\[(?:\s*\d+(?:\.\d+)?|\.\.\.|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s*(.*)$",
    re.DOTALL,
)
KERNEL_FACILITY = 0  # LOG_KERN: the kernel's own messages; user-space writes to /dev/kmsg never get it

# NVRM: Xid (PCI:0000:cb:00): 13, pid=..., name=..., text   (older drivers: "Xid (0000:cb:00): 13, ...").
# The comma after the code is required: a line cut short right after a digit must not read as a shorter code.
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)\): "
    r"(?P<code>\d{1,5})(?P<rest>,.*)$",
    re.DOTALL,
)
# nvidia-nvswitch3: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout error
_SXID = re.compile(
    r"nvidia-nvswitch(?P<switch>\d+): SXid \((?:PCI:)?"
    r"(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)\): "
    r"(?P<code>\d{1,6}), (?P<severity>Fatal|Non-fatal|NonFatal|Correctable|Uncorrectable)(?P<rest>(?:,.*)?)$",
    re.DOTALL | re.IGNORECASE,
)
_PID = re.compile(r"pid=(?P<pid>'?[^,]*'?)")
_NAME = re.compile(r"name=(?P<name>[^,]*)")


@dataclass(frozen=True)
class KernelRecord:
    """One kernel message; `sequence` is the kernel's record number (None for journal, syslog and dmesg copies).

    `facility` is the syslog facility the record's form vouches for (0: the kernel), None where the form
    carries none (syslog and dmesg text) or says it came another way (a journal record not read from the
    kernel); `form` names the form: kmsg, journal, syslog, dmesg or text.
    """

    sequence: int | None
    message: str
    facility: int | None = None
    form: str = "text"

    @property
    def from_kernel(self) -> bool:
        return self.facility == KERNEL_FACILITY


@dataclass(frozen=True)
class XidEvent:
    """An Xid of the GPU at `pci_bus_id` (domain:bus:device as the driver prints it)."""

    pci_bus_id: str
    xid: int
    pid: str | None
    process: str | None
    text: str


@dataclass(frozen=True)
class SxidEvent:
    """An SXid of an NVSwitch; `fatal` is False for non-fatal/correctable ones."""

    pci_bus_id: str
    sxid: int
    fatal: bool
    switch: int
    text: str


def parse_record(line: str) -> KernelRecord | None:
    """One line as a kernel record, or None for a dictionary/continuation line or an empty one."""
    if not line or line[0] in " \t":
        return None  # /dev/kmsg dictionary lines (" SUBSYSTEM=pci") and wrapped continuations
    line = line.rstrip("\r\n")
    found = _KMSG.match(line)
    if found is not None:
        priority = int(found.group(1))
        return KernelRecord(int(found.group(2)), found.group(5), priority >> 3, "kmsg")
    if line.startswith("{"):
        journal = _journal_record(line)
        if journal is not None:
            return journal
    found = _SYSLOG.match(line)
    if found is not None:
        return KernelRecord(None, found.group(1), None, "syslog")
    found = _DMESG.match(line)
    if found is not None:
        return KernelRecord(None, found.group(1), None, "dmesg")
    return KernelRecord(None, line)


def _journal_record(line: str) -> KernelRecord | None:
    """A `journalctl -o json` record, or None when the line is no JSON object with a MESSAGE.

    `_TRANSPORT` is set by journald itself (clients cannot set fields starting with `_`); a record read
    from /dev/kmsg has `kernel` there, and `SYSLOG_FACILITY` from the kernel record's priority.
    """
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    message = doc.get("MESSAGE")
    if isinstance(message, list):  # journald's form of a message that is not UTF-8: its bytes
        try:
            message = bytes(message).decode("utf-8", errors="replace")
        except (TypeError, ValueError):
            return None
    if not isinstance(message, str):
        return None
    facility: int | None = None
    raw_facility = doc.get("SYSLOG_FACILITY")
    if doc.get("_TRANSPORT") == "kernel" and isinstance(raw_facility, str) and raw_facility.isdigit():
        facility = int(raw_facility)
    return KernelRecord(None, message, facility, "journal")


def mentions_event(message: str) -> bool:
    """Whether an Xid or SXid line appears anywhere in `message` (what `parse_event` would refuse to read
    from a record it does not start or that did not come from the kernel)."""
    return "Xid" in message and (_XID.search(message) is not None or _SXID.search(message) is not None)


def parse_event(message: str) -> XidEvent | SxidEvent | None:
    """The Xid or SXid a kernel message reports, or None when it reports neither (or is cut short).

    The match is anchored: the message must start with `NVRM: Xid` or `nvidia-nvswitchN: SXid`, as the
    drivers print them; the same text later in a message (quoted by another kernel message) is no event.
    """
    if "Xid" not in message:
        return None
    found = _XID.match(message)
    if found is not None:
        rest = found.group("rest").lstrip(", ")
        pid = _PID.search(rest)
        name = _NAME.search(rest)
        return XidEvent(
            pci_bus_id=found.group("bus"),
            xid=int(found.group("code")),
            pid=pid.group("pid").strip("'") if pid else None,
            process=name.group("name").strip() if name else None,
            text=rest,
        )
    found = _SXID.match(message)
    if found is not None:
        return SxidEvent(
            pci_bus_id=found.group("bus"),
            sxid=int(found.group("code")),
            fatal=found.group("severity").lower() in ("fatal", "uncorrectable"),
            switch=int(found.group("switch")),
            text=found.group("rest").lstrip(", "),
        )
    return None


def bus_key(pci_bus_id: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address in any width or case, ignoring the function.

    The kernel prints `0000:cb:00` (no function), NVML `00000000:CB:00.0`: both give (0, 0xcb, 0).
    """
    text = pci_bus_id.strip()
    if text.upper().startswith("PCI:"):
        text = text[4:]
    text = text.split(".", 1)[0]
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return None
    try:
        domain, bus, device = (int(p, 16) for p in parts)
    except ValueError:
        return None
    return domain, bus, device
