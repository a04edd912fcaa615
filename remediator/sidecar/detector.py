"""The node detector: Xid/SXid from the kernel log and NVML events, lost GPUs, GPU health, as metrics.

It works without DCGM. Two sources report Xids: the kernel log (every Xid the driver prints, the
lost-GPU ones included) and, where the driver supports it, an NVML event set (`XidCriticalError`).
Each event is counted once:

- across both sources: a report of the same (GPU, Xid) by the *other* source within
  `XID_DEDUPE_SECONDS` is the same event and is not counted again; two reports by one source are two
  events (the kernel numbers its records, NVML delivers each event once). The memory of recent reports
  is bounded: a (GPU, Xid) pair is forgotten `XID_DEDUPE_SECONDS` after its last report, at most
  `MAX_DEDUPE_SERIES` pairs are kept (the least recently reported goes first) and at most
  `MAX_PENDING_PER_SOURCE` unmatched reports per pair and source. Forgetting early can only count a
  report of both sources twice, never drop one, and each line costs the same however many pairs were seen;
- across restarts: the sequence number of the last kernel record handled (with the boot it belongs
  to) is kept in the state file, written after each batch of records; after a restart, records up to
  it are skipped. After a reboot the kernel numbers from 0 again, which the boot id tells apart.

Each kernel Xid line is decoded as NVIDIA documents for the codes whose action depends on the message (45, 74,
144-150, 154; `remediator.domain.xid_decode`, the decode the controller runs too): the action is the counter's
`xid_action` label, empty for every other code and where the line does not carry what the decode reads. NVML
events carry no message, so an NVML report of such a code waits up to `XID_DEDUPE_SECONDS` for the kernel
line of the same event (which is then counted, with its decode, instead of it) and is counted without a
decode only if none comes (at most `MAX_DEDUPE_SERIES` wait; the oldest is counted when more arrive).

GPU failures the driver reports without an Xid (`kmsg.GpuKernelEvent`) are counted by kind in
`gpu_remediator_kernel_events_total`. A GPU that fell off the bus is counted as Xid 79 too, so the Xid 79
rule fires whether or not the driver printed an Xid (a `NVRM: GPU ...: GPU has fallen off the bus` line
and the Xid 79 line beside it are one event, deduplicated like the two sources). A GPU whose
`RmInitAdapter` failed is remembered for the boot (in the state file, with the boot id), and the gate
fails it (`init_failure`) until a reset of that GPU succeeds.

Only the kernel's own records count (see `kmsg.py`): a record of another facility (written to
/dev/kmsg from user space), a syslog/dmesg text copy, or a message that quotes an Xid line instead of
starting with it is refused and counted in `remediator_sidecar_kernel_lines_refused_total{reason}`.

The GPUs seen at the first start are kept in the state file too: a GPU that later goes missing is
reported lost with its UUID and PCI address, and an Xid the kernel reports for a GPU NVML can no
longer reach (Xid 79) still carries them.
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from remediator.domain.json_values import JsonObject
from remediator.domain.xid_decode import DECODED_CODES, decoded_action
from remediator.sidecar.devices import GpuIds, parse_device_id
from remediator.sidecar.kmsg import (
    GpuKernelEvent,
    KernelRecord,
    SxidEvent,
    XidEvent,
    bus_key,
    mentions_event,
    parse_event,
    parse_record,
)
from remediator.sidecar.metrics import SidecarMetrics, replace_series
from remediator.sidecar.node_health import GpuRecord, NodeHealth
from remediator.sidecar.nvml import XidNotice
from remediator.sidecar.podresources import PodAllocation
from remediator.sidecar.problems import Problem
from remediator.sidecar.state import read_state, update_state

__all__ = ["Detector", "DetectorConfig", "nvml_bus_id"]

log = logging.getLogger(__name__)

STATE_KEY = "detector"
KMSG = "kmsg"
NVML_EVENTS = "nvml_events"
# A GPU-lost line without an Xid ("GPU has fallen off the bus", no "Xid 79"): counted as Xid 79 like a source of
# its own, so the Xid 79 line older drivers print beside it is the same event, not a second one.
KMSG_FALLEN = "kmsg_fallen_off_bus"
MAX_INIT_FAILURES = 64
MAX_DEDUPE_SERIES = 4096
MAX_PENDING_PER_SOURCE = 64
_REFUSAL_LOG_SECONDS = 60.0


def _as_int(value: object) -> int:
    """A remembered number (an int, or a number written as text); TypeError for anything else."""
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"not a number: {value!r}")


def nvml_bus_id(key: tuple[int, int, int]) -> str:
    """NVML's form of a PCI address: `00000000:CB:00.0`."""
    domain, bus, device = key
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


@dataclass(frozen=True)
class DetectorConfig:
    node_name: str
    state_file: Path
    boot_id_file: Path
    expected_gpus: int | None = None
    dedupe_seconds: float = 10.0
    resource_prefix: str = "nvidia.com/"
    device_id_strategy: str = "uuid"

    @property
    def hostname(self) -> str:
        return self.node_name or socket.gethostname()


@dataclass
class _Pending:
    """The reports of one (GPU, Xid) pair not yet matched by the other source, oldest first, per source."""

    last: float
    by_source: dict[str, collections.deque[float]]


class Detector:
    """Counts Xid/SXid events once and keeps the node's GPU gauges; every method is thread-safe."""

    def __init__(
        self,
        config: DetectorConfig,
        metrics: SidecarMetrics,
        lookup_bus: Callable[[str], GpuRecord | None] = lambda bus: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._lookup_bus = lookup_bus
        self._clock = clock
        self._lock = threading.RLock()
        # Ordered by last report (oldest first), so expiry and eviction take from the front.
        self._recent: collections.OrderedDict[tuple[str, int], _Pending] = collections.OrderedDict()
        self._refusal_logged: dict[str, float] = {}
        # NVML reports of decoded codes waiting for their kernel line: (when, GPU, bus, xid, uuid), oldest first.
        self._waiting: collections.deque[tuple[float, GpuRecord | None, str, int, str | None]] = collections.deque()
        self._event_logged: dict[str, float] = {}
        self._dirty = False
        self._boot_id = self._read_boot_id()
        self._inventory: dict[str, GpuRecord] = {}
        self._sequence: int | None = None
        self._saved_sequence: int | None = None
        # NVML bus id -> {"text", "sequence"} of the GPUs whose init failed in this boot, oldest first.
        self._init_failures: dict[str, JsonObject] = {}
        self._load()

    # -- persisted state ----------------------------------------------------------------------------

    def _read_boot_id(self) -> str:
        try:
            return self.config.boot_id_file.read_text().strip()
        except OSError:
            return ""

    def _load(self) -> None:
        try:
            doc = read_state(self.config.state_file).get(STATE_KEY)
        except Problem as exc:
            log.error("detector: %s; starting without remembered state", exc.error)
            doc = None
        if not isinstance(doc, dict):
            return
        inventory = doc.get("inventory")
        for uuid, gpu in inventory.items() if isinstance(inventory, dict) else ():
            try:
                if not isinstance(gpu, dict):
                    raise TypeError(f"not a GPU record: {gpu!r}")
                self._inventory[str(uuid)] = GpuRecord(
                    _as_int(gpu["index"]), str(uuid), str(gpu["pci_bus_id"]), str(gpu.get("name", ""))
                )
            except (KeyError, TypeError, ValueError):
                continue
        sequence = doc.get("kmsg_sequence")
        if isinstance(sequence, int) and doc.get("boot_id") == self._boot_id:
            self._sequence = self._saved_sequence = sequence
        failures = doc.get("init_failures")
        if isinstance(failures, dict) and doc.get("boot_id") == self._boot_id:
            for bus, failure in list(failures.items())[-MAX_INIT_FAILURES:]:
                if isinstance(failure, dict) and isinstance(failure.get("text"), str):
                    self._init_failures[str(bus)] = {"text": failure["text"], "sequence": failure.get("sequence")}

    def _save(self) -> None:
        doc: JsonObject = {
            "boot_id": self._boot_id,
            "kmsg_sequence": self._sequence,
            "init_failures": {**self._init_failures},
            "inventory": {
                g.uuid: {"index": g.index, "pci_bus_id": g.pci_bus_id, "name": g.name}
                for g in sorted(self._inventory.values(), key=lambda g: g.index)
            },
        }
        try:
            update_state(self.config.state_file, STATE_KEY, doc)
            self._saved_sequence = self._sequence
            self._dirty = False
        except Problem as exc:
            log.error("detector: %s", exc.error)

    @property
    def kmsg_sequence(self) -> int | None:
        return self._sequence

    @property
    def dedupe_pairs(self) -> int:
        """How many (GPU, Xid) pairs the cross-source dedupe remembers now (at most MAX_DEDUPE_SERIES)."""
        with self._lock:
            return len(self._recent)

    @property
    def inventory(self) -> list[GpuRecord]:
        with self._lock:
            return sorted(self._inventory.values(), key=lambda g: g.index)

    # -- kernel log -----------------------------------------------------------------------------------

    def handle_line(self, line: str) -> None:
        """One kernel log line (from the reader thread)."""
        record = parse_record(line)
        if record is None:
            return
        with self._lock:
            if record.sequence is not None:
                if self._sequence is not None and record.sequence <= self._sequence:
                    return  # handled before a restart
                self._sequence = record.sequence
            if not record.from_kernel:
                if mentions_event(record.message):
                    self._refuse("facility", record)
                return
            event = parse_event(record.message)
            if isinstance(event, XidEvent):
                self._count_kmsg_xid(event)
            elif isinstance(event, SxidEvent):
                self._count_sxid(event)
            elif isinstance(event, GpuKernelEvent):
                self._count_kernel_event(event, record.sequence)
            elif mentions_event(record.message):
                self._refuse("unanchored", record)

    def refuse(self, reason: str, what: str) -> None:
        """Count a kernel log line refused before it was parsed (the reader's over-long lines)."""
        with self._lock:
            self.metrics.kernel_lines_refused.labels(reason).inc()
            self._log_refusal(reason, what)

    def _refuse(self, reason: str, record: KernelRecord) -> None:
        self.metrics.kernel_lines_refused.labels(reason).inc()
        if reason == "facility":
            source = f"facility {record.facility}" if record.facility is not None else "no facility"
            what = f"a {record.form} record with {source} (not the kernel's)"
        else:
            what = "a kernel record that does not start with the driver's prefix"
        self._log_refusal(reason, f"{what}: {record.message[:200]!r}")

    def _log_refusal(self, reason: str, what: str) -> None:
        """A warning per reason at most once a minute: spoofed lines must not flood the log either."""
        now = self._clock()
        last = self._refusal_logged.get(reason)
        if last is None or now - last >= _REFUSAL_LOG_SECONDS:
            self._refusal_logged[reason] = now
            log.warning("detector: refused %s (reason %s; counted in "
                        "remediator_sidecar_kernel_lines_refused_total)", what, reason)

    def end_batch(self) -> None:
        """Persist the last sequence number handled (after each batch the reader reads)."""
        with self._lock:
            if self._sequence != self._saved_sequence or self._dirty:
                self._save()

    def _count_kmsg_xid(self, event: XidEvent) -> None:
        key = bus_key(event.pci_bus_id)
        if key is None:
            return
        gpu = self._gpu_by_bus(key)
        bus = nvml_bus_id(key)
        action = ""
        if event.xid in DECODED_CODES:
            action = decoded_action(event.xid, event.text) or ""
            self._take_waiting(gpu.uuid if gpu else bus, event.xid)
        self._count_xid(gpu, bus, event.xid, KMSG, instance=(event.gpu_instance or "", event.compute_instance or ""),
                        action=action)

    def _count_sxid(self, event: SxidEvent) -> None:
        key = bus_key(event.pci_bus_id)
        bus = nvml_bus_id(key) if key else event.pci_bus_id
        self.metrics.sxid_events.labels(
            self.config.hostname, bus, str(event.sxid), "true" if event.fatal else "false",
            "" if event.link is None else str(event.link),
        ).inc()

    def _count_kernel_event(self, event: GpuKernelEvent, sequence: int | None) -> None:
        """A GPU failure line without an Xid: counted by kind, for the GPU it names where it names one.

        A GPU that fell off the bus is also counted as Xid 79 (the same series, so the same alert, as the
        Xid line of older drivers; the two lines of one loss count once). A GPU that did not initialise is
        remembered for this boot (persisted), so the gate fails it until a reset of that GPU succeeds.
        """
        key = bus_key(event.pci_bus_id) if event.pci_bus_id else None
        gpu = self._gpu_by_bus(key) if key is not None else None
        bus = nvml_bus_id(key) if key is not None else ""
        self.metrics.kernel_events.labels(
            self.config.hostname,
            gpu.uuid if gpu else "",
            str(gpu.index) if gpu else "",
            bus,
            gpu.name if gpu else "",
            event.kind,
        ).inc()
        if event.kind == "fallen_off_bus" and key is not None:
            self._count_xid(gpu, bus, 79, KMSG_FALLEN)
        elif event.kind == "gpu_init_failed" and key is not None:
            self._init_failures.pop(bus, None)
            self._init_failures[bus] = {"text": event.text[:500], "sequence": sequence}
            while len(self._init_failures) > MAX_INIT_FAILURES:
                self._init_failures.pop(next(iter(self._init_failures)))
            self._dirty = True  # persisted by end_batch, once per batch however often the driver prints it
        self._log_event(event.kind, f"{event.kind}{f' on {bus}' if bus else ''}: {event.text[:300]}")

    def _log_event(self, kind: str, what: str) -> None:
        """A warning per kind at most once a minute (the counter has every one): a GPU the driver retries
        prints its failure on every attempt."""
        now = self._clock()
        last = self._event_logged.get(kind)
        if last is None or now - last >= _REFUSAL_LOG_SECONDS:
            self._event_logged[kind] = now
            log.warning("detector: %s (counted in gpu_remediator_kernel_events_total)", what)

    def init_failure(self, uuid: str) -> str | None:
        """The driver's `RmInitAdapter failed` line for the GPU `uuid` (found by its PCI address in the
        inventory) in this boot, if the driver printed one since the last reset of that GPU that succeeded."""
        with self._lock:
            gpu = self._inventory.get(uuid)
            key = bus_key(gpu.pci_bus_id) if gpu else None
            found = self._init_failures.get(nvml_bus_id(key)) if key is not None else None
            return str(found["text"]) if found else None

    def knows(self, uuid: str) -> bool:
        """Whether `uuid` is a GPU of this node's inventory (seen since the first start)."""
        with self._lock:
            return uuid in self._inventory

    def reset_succeeded(self, uuid: str) -> None:
        """A reset of the GPU `uuid` succeeded: the driver initialised it again, so an init failure before
        it is history (a failure after it prints a new line, which is read again)."""
        with self._lock:
            gpu = self._inventory.get(uuid)
            key = bus_key(gpu.pci_bus_id) if gpu else None
            if key is not None and self._init_failures.pop(nvml_bus_id(key), None) is not None:
                self._save()

    def _gpu_by_bus(self, key: tuple[int, int, int]) -> GpuRecord | None:
        for gpu in self._inventory.values():
            if bus_key(gpu.pci_bus_id) == key:
                return gpu
        try:
            found = self._lookup_bus(nvml_bus_id(key))
        except Exception as exc:  # NVML may be gone with the GPU: count the event regardless
            log.warning("detector: no GPU found at %s through NVML: %s", nvml_bus_id(key), exc)
            return None
        if found is not None:
            self._remember([found])
        return found

    # -- NVML events ----------------------------------------------------------------------------------

    def handle_nvml(self, notice: XidNotice) -> None:
        """One Xid from the NVML event set (from the event thread). A code whose action is decoded from its
        message waits for its kernel line (see the module docstring)."""
        with self._lock:
            gpu = self._inventory.get(notice.uuid or "")
            bus = gpu.pci_bus_id if gpu else ""
            self.flush_waiting()
            if notice.xid in DECODED_CODES:
                if self._duplicate(((gpu.uuid if gpu else notice.uuid) or bus, notice.xid), NVML_EVENTS, record=False):
                    return  # its kernel line came first and was counted with its decode
                if len(self._waiting) >= MAX_DEDUPE_SERIES:
                    self._count_waiting(self._waiting.popleft())
                self._waiting.append((self._clock(), gpu, bus, notice.xid, notice.uuid))
                return
            self._count_xid(gpu, bus, notice.xid, NVML_EVENTS, notice.uuid)

    def flush_waiting(self) -> None:
        """Count the NVML reports of decoded codes whose kernel line did not come within the window (also
        called on each refresh of the gauges, so one shows by the next scrape after its window)."""
        with self._lock:
            now = self._clock()
            while self._waiting and now - self._waiting[0][0] > self.config.dedupe_seconds:
                self._count_waiting(self._waiting.popleft())

    def _count_waiting(self, waiting: tuple[float, GpuRecord | None, str, int, str | None]) -> None:
        """An NVML report no kernel line matched: its own event, counted without a decode."""
        _, gpu, bus, xid, uuid = waiting
        self._inc_xid(gpu, bus, xid, uuid, ("", ""), "")

    def _take_waiting(self, key: str, xid: int) -> None:
        """A kernel line of a decoded code: the oldest NVML report of it waiting within the window is the
        same event, counted through the line (with its decode) and not again."""
        now = self._clock()
        for index, (when, gpu, bus, code, uuid) in enumerate(self._waiting):
            if code == xid and (gpu.uuid if gpu else (uuid or bus)) == key and now - when <= self.config.dedupe_seconds:
                del self._waiting[index]
                return

    # -- counting -------------------------------------------------------------------------------------

    def _count_xid(
        self,
        gpu: GpuRecord | None,
        bus: str,
        xid: int,
        source: str,
        uuid: str | None = None,
        instance: tuple[str, str] = ("", ""),
        action: str = "",
    ) -> None:
        if self._duplicate(((gpu.uuid if gpu else uuid) or bus, xid), source):
            return
        self._inc_xid(gpu, bus, xid, uuid, instance, action)

    def _inc_xid(
        self, gpu: GpuRecord | None, bus: str, xid: int, uuid: str | None, instance: tuple[str, str], action: str
    ) -> None:
        self.metrics.xid_events.labels(
            self.config.hostname,
            gpu.uuid if gpu else (uuid or ""),
            str(gpu.index) if gpu else "",
            bus,
            gpu.name if gpu else "",
            str(xid),
            *instance,
            action,
        ).inc()

    def _duplicate(self, key: tuple[str, int], source: str, record: bool = True) -> bool:
        """Whether the other source already counted this (GPU, Xid) within the window; `record` False leaves
        an unmatched report out of the memory (an NVML report that waits for its kernel line instead).

        Constant work per call: pairs expire from the front of `_recent` (ordered by last report), the
        least recently reported pair goes when there are too many, and each deque holds only reports
        no other source has matched yet.
        """
        now = self._clock()
        window = self.config.dedupe_seconds
        recent = self._recent
        while recent:
            oldest = next(iter(recent.values()))
            if now - oldest.last <= window:
                break
            recent.popitem(last=False)
        pending = recent.get(key)
        if pending is None:
            pending = recent[key] = _Pending(now, {})
            while len(recent) > MAX_DEDUPE_SERIES:
                recent.popitem(last=False)
        else:
            recent.move_to_end(key)
            pending.last = now
        for other, seen in pending.by_source.items():
            if other == source:
                continue
            while seen and now - seen[0] > window:
                seen.popleft()
            if seen:
                seen.popleft()  # the other source's oldest unmatched report of this event
                return True
        if not record:
            return False
        own = pending.by_source.get(source)
        if own is None:
            own = pending.by_source[source] = collections.deque(maxlen=MAX_PENDING_PER_SOURCE)
        own.append(now)
        return False

    # -- inventory, lost GPUs and health --------------------------------------------------------------

    def _remember(self, gpus: Sequence[GpuRecord]) -> bool:
        changed = False
        for gpu in gpus:
            if self._inventory.get(gpu.uuid) != gpu:
                self._inventory[gpu.uuid] = gpu
                changed = True
        return changed

    def observe(self, health: NodeHealth, allocations: Sequence[PodAllocation] | None) -> None:
        """Refresh the node gauges from one health read; `allocations` None when the kubelet is unreachable."""
        host = self.config.hostname
        with self._lock:
            self.flush_waiting()
            if self._remember([g.gpu for g in health.gpus]):
                self._save()
            visible = {g.gpu.uuid for g in health.gpus}
            lost_series: dict[tuple[str, ...], float] = {}
            for gpu in self._inventory.values():
                missing = gpu.uuid not in visible
                lost_series[(host, gpu.uuid, str(gpu.index), gpu.pci_bus_id)] = 1.0 if missing else 0.0
            for lost in health.lost:
                if not lost.uuid:
                    known = next((g for g in self._inventory.values() if g.index == lost.index), None)
                    if known is None:
                        lost_series[(host, "", str(lost.index), "")] = 1.0
            expected = self.config.expected_gpus
            if expected is None:
                expected = len(self._inventory)
            self.metrics.gpus_expected.labels(host).set(expected)
            self.metrics.gpus_visible.labels(host).set(len(health.gpus))
            replace_series(self.metrics.gpu_lost, lost_series)
            per_gauge: dict[str, dict[tuple[str, ...], float]] = {name: {} for name in self.metrics.health}
            nvlink: dict[tuple[str, ...], float] = {}
            for item in health.gpus:
                labels = (host, item.gpu.uuid, str(item.gpu.index), item.gpu.pci_bus_id, item.gpu.name)
                for name, value in item.values.items():
                    if value is not None and name in per_gauge:
                        per_gauge[name][labels] = float(value)
                if allocations is not None:
                    held = self._held(item.gpu, item.mig_uuids, allocations)
                    per_gauge["orphaned_memory_bytes"][labels] = 0.0 if held else float(item.process_memory_bytes)
                for link, counts in item.nvlink_errors.items():
                    for error, count in counts.items():
                        nvlink[(*labels, str(link), error)] = float(count)
            for name, series in per_gauge.items():
                replace_series(self.metrics.health[name], series)
            self.metrics.nvlink_errors.replace(nvlink)

    def _held(self, gpu: GpuRecord, mig_uuids: Sequence[str], allocations: Sequence[PodAllocation]) -> bool:
        identity = GpuIds(index=gpu.index, uuid=gpu.uuid, mig_uuids=mig_uuids)
        strategy: Literal["uuid", "index"] = "index" if self.config.device_id_strategy == "index" else "uuid"
        for pod in allocations:
            for dev in pod.devices:
                if not dev.resource.startswith(self.config.resource_prefix):
                    continue
                for device_id in dev.device_ids:
                    if parse_device_id(device_id, strategy).matches(identity, gpu.uuid):
                        return True
        return False
