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

Besides Xids and SXids the driver reports GPU failures in lines of their own, which carry no Xid
(`GpuKernelEvent`, one `kind` each): a GPU that fell off the bus (`NVRM: GPU 0000:91:00.0: GPU has fallen
off the bus.`, or the three-line `NVRM: The NVIDIA GPU ... has fallen off the bus` printk that newer drivers
write instead of an Xid 79), a GPU that did not initialise (`RmInitAdapter failed!`), a status asking for a
reset (`[NV_ERR_RESET_REQUIRED]` and its siblings), and NVLink discovery or training failures
(`postRxDetLinkMask`). An Xid printed on a MIG GPU names the GPU instance (and compute instance) it is
attributed to: `NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:02): 94, ...`; both are kept (decimal, as
dcgm-exporter's `GPU_I_ID`). `tests/sidecar/data/kernel-log-lines.jsonl` holds the real lines each shape
is proven against.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = [
    "KERNEL_EVENT_KINDS",
    "KERNEL_FACILITY",
    "GpuKernelEvent",
    "KernelRecord",
    "SxidEvent",
    "XidEvent",
    "bus_key",
    "mentions_event",
    "parse_event",
    "parse_record",
]

# PRIORITY,SEQUENCE,TIMESTAMP_US,FLAGS[,more fields];MESSAGE  (Documentation/ABI/testing/dev-kmsg)
# (the pattern `_kmsg_record` reads with string operations; kept to test that both agree)
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
# On a MIG GPU: "Xid (PCI:0000:01:00 GPU-I:05): 94, ..." or "Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:02): 94, ..."
# (the driver's "GPU-I:%02u GPU-CI:%02u"). The comma after the code is required: a line cut short right after a
# digit must not read as a shorter code.
_BUS = r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?"
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>" + _BUS + r")(?: GPU-I:(?P<gi>\d{1,3}))?(?: GPU-CI:(?P<ci>\d{1,3}))?\): "
    r"(?P<code>\d{1,5})(?P<rest>,.*)$",
    re.DOTALL,
)
# nvidia-nvswitch3: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout error
# The severity word is required, except for the codes the switch driver prints without one (`_UNSTATED`):
# without it a line cut inside the word, or the "Severity 1 Engine instance .." and "Data {..}" lines that
# follow the first line of one report, would read as events.
_SXID = re.compile(
    r"nvidia-nvswitch(?P<switch>\d+): SXid \((?:PCI:)?(?P<bus>" + _BUS + r")\): "
    r"(?P<code>\d{1,6}), (?:(?P<severity>Fatal|Non-fatal|NonFatal|Correctable|Uncorrectable)(?=,|$|\s))?"
    r"(?P<rest>.*)$",
    re.DOTALL | re.IGNORECASE,
)
# SXids the NVSwitch driver prints with NVSWITCH_PRINT_SXID and no severity word (the SOE's: NVSWITCH_ERR_HW_SOE_*,
# 26000-26008), with their severity as NVSentinel's sxiderrorsmapping.csv gives it where it gives one; an
# SOE code it does not rate is counted as non-fatal.
_UNSTATED: dict[int, bool] = {
    26000: False, 26001: False, 26002: False, 26003: False, 26004: False, 26005: False,
    26006: True,  # NVSWITCH_ERR_HW_SOE_HALT, FATAL
    26007: False,
    26008: False,  # NVSWITCH_ERR_HW_SOE_WATCHDOG, NONFATAL
}
_SXID_CONTINUATION = re.compile(r"(?:Severity \d|Data \{)")
_LINK = re.compile(r"\bLink (?P<link>-?\d{1,3})\b")

# Lines that report a GPU failure without an Xid. Each starts with "NVRM: " as the driver prints it.
# "NVRM: GPU 0000:91:00.0: GPU has fallen off the bus."
_FALLEN = re.compile(r"NVRM: GPU (?P<bus>" + _BUS + r"): GPU has fallen off the bus\b")
# "NVRM: The NVIDIA GPU 0000:b3:00.0\n NVRM: (PCI ID: 10de:26b5) installed in this system has\n NVRM: fallen off
# the bus and is not responding to commands." (one record; /dev/kmsg escapes its newlines as \x0a)
_FALLEN_LONG = re.compile(
    r"NVRM: The NVIDIA GPU (?P<bus>" + _BUS + r")\s+(?:NVRM: )?\(PCI ID: [0-9A-Fa-f:]+\) installed in this system"
    r" has\s+(?:NVRM: )?fallen off the bus\b",
    re.DOTALL,
)
# "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)"; older drivers: "NVRM: RmInitAdapter failed!
# (0x26:0xffff:1227)" and "NVRM: rm_init_adapter failed for device bearing minor number 0"
_INIT_FAILED = re.compile(
    r"NVRM: (?:GPU (?P<bus>" + _BUS + r"): )?(?:RmInitAdapter failed!|rm_init_adapter failed\b)"
)
# "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned
# from ...": a status that only a GPU reset clears (the driver's NV_ERR_RESET_REQUIRED, NV_ERR_GPU_IN_FULLCHIP_RESET
# while one is under way, NV_ERR_GPU_NOT_FULL_POWER left after a failed one), wherever the driver prints it.
_RESET_REQUIRED = re.compile(
    r"NVRM: .*\[(?P<status>NV_ERR_RESET_REQUIRED|NV_ERR_GPU_IN_FULLCHIP_RESET|NV_ERR_GPU_NOT_FULL_POWER)\]",
    re.DOTALL,
)
# "NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!" and
# "NVRM: knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update Rx Detect Link mask!": NVLink discovery
# cannot read which links passed receiver detection (the driver retries and nvidia-smi hangs behind it).
_RX_DETECT = re.compile(
    r"NVRM: (?:\w+: )?(?:Getting peer\d+(?:'s)? postRxDetLinkMask failed|Failed to update Rx Detect Link mask)"
)
# NVLink link training failures: "NVRM: knvlinkTrainLinksToActive: NVLink link training failed for link 3" and
# the like (a message of an NVLink function or naming NVLink, saying that training failed).
_TRAINING_FAILED = re.compile(
    r"NVRM: (?=[^\n]*nvlink)[^\n]*(?:train(?:ing)? (?:\w+ )?fail|fail(?:ed)? to train)", re.IGNORECASE
)
_PCI_ANYWHERE = re.compile(r"\b(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\b")
_MENTIONS = 32
KERNEL_EVENT_KINDS = ("fallen_off_bus", "gpu_init_failed", "reset_required", "nvlink_rx_detect",
                      "nvlink_training_failed")
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
    """An Xid of the GPU at `pci_bus_id` (domain:bus:device as the driver prints it); on a MIG GPU the GPU
    instance and compute instance it is attributed to (decimal, no leading zeros), else None."""

    pci_bus_id: str
    xid: int
    pid: str | None
    process: str | None
    text: str
    gpu_instance: str | None = None
    compute_instance: str | None = None


@dataclass(frozen=True)
class SxidEvent:
    """An SXid of an NVSwitch; `fatal` is False for non-fatal/correctable ones; `link` the switch port's
    link number the line names (None when it names none); `severity_stated` False for the codes the driver
    prints without a severity word (their `fatal` comes from the table of those codes)."""

    pci_bus_id: str
    sxid: int
    fatal: bool
    switch: int
    text: str
    link: int | None = None
    severity_stated: bool = True


@dataclass(frozen=True)
class GpuKernelEvent:
    """A GPU failure the driver reports without an Xid; `kind` is one of KERNEL_EVENT_KINDS, `pci_bus_id` the
    GPU's address where the line names one, `detail` what else the line says (the driver's status name, its
    init failure code)."""

    kind: str
    pci_bus_id: str | None
    detail: str
    text: str


def parse_record(line: str) -> KernelRecord | None:
    """One line as a kernel record, or None for a dictionary/continuation line or an empty one."""
    if not line or line[0] in " \t":
        return None  # /dev/kmsg dictionary lines (" SUBSYSTEM=pci") and wrapped continuations
    line = line.rstrip("\r\n")
    record = _kmsg_record(line)
    if record is not None:
        return record
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


def _kmsg_record(line: str) -> KernelRecord | None:
    """`line` as a /dev/kmsg record, or None when it is not one: what `_KMSG` matches, read with string
    operations (the head before the first ';' split at commas), since every kernel line passes here."""
    head, semicolon, message = line.partition(";")
    if not semicolon:
        return None
    fields = head.split(",", 4)
    if len(fields) < 4 or not (fields[0].isdecimal() and fields[1].isdecimal() and fields[2].isdecimal()):
        return None
    return KernelRecord(int(fields[1]), message, int(fields[0]) >> 3, "kmsg")


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
    """Whether an Xid or SXid line, or a GPU failure line, appears anywhere in `message` (what `parse_event`
    would refuse to read from a record it does not start or that did not come from the kernel).

    Bounded work for a line crafted to be costly: at most `_MENTIONS` places per prefix, each read over
    at most 4 KiB (more than any driver line).
    """
    if "NVRM: " not in message and "nvidia-nvswitch" not in message:
        return False
    for prefix in ("NVRM: ", "nvidia-nvswitch"):
        start = message.find(prefix)
        for _ in range(_MENTIONS):
            if start == -1:
                break
            if parse_event(message[start:start + 4096]) is not None:
                return True
            start = message.find(prefix, start + 1)
    return False


def _instance(value: str | None) -> str | None:
    return str(int(value)) if value is not None else None


def parse_event(message: str) -> XidEvent | SxidEvent | GpuKernelEvent | None:
    """The Xid, SXid or other GPU failure a kernel message reports, or None when it reports none (or is cut
    short).

    The match is anchored: the message must start with `NVRM: ` or `nvidia-nvswitchN: SXid`, as the
    drivers print them; the same text later in a message (quoted by another kernel message) is no event.
    """
    if message.startswith("NVRM: "):
        if message.startswith("NVRM: Xid"):
            return _xid(message)
        return _gpu_event(message)
    if message.startswith("nvidia-nvswitch"):
        return _sxid(message)
    return None


def _xid(message: str) -> XidEvent | None:
    found = _XID.match(message)
    if found is None:
        return None
    rest = found.group("rest").lstrip(", ")
    pid = _PID.search(rest)
    name = _NAME.search(rest)
    return XidEvent(
        pci_bus_id=found.group("bus"),
        xid=int(found.group("code")),
        pid=pid.group("pid").strip("'") if pid else None,
        process=name.group("name").strip() if name else None,
        text=rest,
        gpu_instance=_instance(found.group("gi")),
        compute_instance=_instance(found.group("ci")),
    )


def _sxid(message: str) -> SxidEvent | None:
    found = _SXID.match(message)
    if found is None:
        return None
    code = int(found.group("code"))
    severity = found.group("severity")
    rest = found.group("rest")
    if severity is None:
        if code not in _UNSTATED or _SXID_CONTINUATION.match(rest):
            return None  # a continuation line, a line cut inside the severity word, or an unknown shape
        fatal = _UNSTATED[code]
    else:
        fatal = severity.lower() in ("fatal", "uncorrectable")
    link = _LINK.search(rest)
    return SxidEvent(
        pci_bus_id=found.group("bus"),
        sxid=code,
        fatal=fatal,
        switch=int(found.group("switch")),
        text=rest.lstrip(", "),
        link=int(link.group("link")) if link else None,
        severity_stated=severity is not None,
    )


def _gpu_event(message: str) -> GpuKernelEvent | None:
    """A failure line of the GPU driver that carries no Xid (the message starts with "NVRM: ")."""
    found = _FALLEN.match(message)
    if found is not None:
        return GpuKernelEvent("fallen_off_bus", found.group("bus"), "", message[6:])
    if message.startswith("NVRM: The NVIDIA GPU "):
        found = _FALLEN_LONG.match(message.replace("\\x0a", "\n"))
        if found is not None:
            return GpuKernelEvent("fallen_off_bus", found.group("bus"), "", message[6:])
        return None
    found = _INIT_FAILED.match(message)
    if found is not None:
        code = re.search(r"\((0x[0-9A-Fa-f]+:0x[0-9A-Fa-f]+:\d+)\)", message)
        return GpuKernelEvent("gpu_init_failed", found.group("bus"), code.group(1) if code else "", message[6:])
    if "[NV_ERR_" in message:
        found = _RESET_REQUIRED.match(message)
        if found is not None:
            bus = _PCI_ANYWHERE.search(message)
            return GpuKernelEvent("reset_required", bus.group("bus") if bus else None, found.group("status"),
                                  message[6:])
        return None
    if "RxDet" in message or "Rx Detect" in message:
        if _RX_DETECT.match(message) is not None:
            return GpuKernelEvent("nvlink_rx_detect", None, "", message[6:])
        return None
    if _TRAINING_FAILED.match(message) is not None:
        bus = _PCI_ANYWHERE.search(message)
        return GpuKernelEvent("nvlink_training_failed", bus.group("bus") if bus else None, "", message[6:])
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
