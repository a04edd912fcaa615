"""Kernel log records and the GPU errors the NVIDIA drivers write into them, parsed without I/O.

The GPU driver reports every Xid as a kernel message (`NVRM: Xid (PCI:0000:cb:00): 13, pid=..., ...`) and
the NVSwitch driver every SXid (`nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, ...`). This is
the one source that still speaks when NVML and DCGM cannot (Xid 79: the GPU fell off the bus). Records
come as `/dev/kmsg` gives them (`PRIORITY,SEQUENCE,TIMESTAMP_US,FLAGS;MESSAGE`, dictionary lines after
it start with a space) or as syslog/journal copies (`... kernel: [123.456] MESSAGE`). Anything else,
a truncated line included, parses to None: an unknown line is never an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "KernelRecord",
    "SxidEvent",
    "XidEvent",
    "bus_key",
    "parse_event",
    "parse_record",
]

# PRIORITY,SEQUENCE,TIMESTAMP_US,FLAGS[,more fields];MESSAGE  (Documentation/ABI/testing/dev-kmsg)
_KMSG = re.compile(r"^(\d+),(\d+),(\d+),([^;,]*)(?:,[^;]*)?;(.*)$", re.DOTALL)
# "Dec  3 10:00:00 host kernel: [  123.456789] MESSAGE" or "... kernel: MESSAGE" (journalctl -k copies)
_SYSLOG = re.compile(r"(?:^|\s)kernel:\s*(?:\[\s*\d+\.\d+\]\s*)?(.*)$", re.DOTALL)
# "[  123.456789] MESSAGE" (dmesg)
_DMESG = re.compile(r"^\[\s*\d+\.\d+\]\s*(.*)$", re.DOTALL)

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
    """One kernel message; `sequence` is the kernel's record number (None for syslog/dmesg copies)."""

    sequence: int | None
    message: str


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
        return KernelRecord(int(found.group(2)), found.group(5))
    found = _SYSLOG.search(line) or _DMESG.match(line)
    if found is not None:
        return KernelRecord(None, found.group(1))
    return KernelRecord(None, line)


def parse_event(message: str) -> XidEvent | SxidEvent | None:
    """The Xid or SXid a kernel message reports, or None when it reports neither (or is cut short)."""
    if "Xid" not in message:
        return None
    found = _XID.search(message)
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
    found = _SXID.search(message)
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
