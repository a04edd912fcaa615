"""Runs the node detector inside the sidecar app: its two reader threads and its refresh on each scrape.

At start it reads every GPU once (which also records the GPUs of the first start in the state file),
then starts the kernel log reader and, when enabled, the NVML Xid event thread. Each scrape of
/metrics refreshes the GPU gauges (NVML on the sidecar's NVML thread, the kubelet's allocations for the
orphaned-memory gauge). Nothing here raises into the app: a missing kernel log or NVML is logged and
shown by `gpu_remediator_detector_source_up`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from remediator.sidecar.detector import KMSG, NVML_EVENTS, Detector, DetectorConfig
from remediator.sidecar.kmsg_reader import MAX_LINE, KmsgReader
from remediator.sidecar.metrics import SidecarMetrics
from remediator.sidecar.node_health import GpuRecord, NodeHealth, read_gpu_record, read_node_health
from remediator.sidecar.nvml import Nvml, NvmlError
from remediator.sidecar.nvml_events import NvmlXidWatcher
from remediator.sidecar.podresources import PodAllocation, PodResourcesClient
from remediator.sidecar.problems import Problem
from remediator.sidecar.settings import SidecarSettings
from remediator.sidecar.worker import NvmlWorker

__all__ = ["DetectorService"]

log = logging.getLogger(__name__)


class DetectorService:
    """The detector and its sources for one sidecar app."""

    def __init__(
        self,
        settings: SidecarSettings,
        nvml: Nvml,
        worker: NvmlWorker,
        podresources: PodResourcesClient,
        metrics: SidecarMetrics,
    ) -> None:
        self.settings = settings
        self.nvml = nvml
        self.worker = worker
        self.podresources = podresources
        self.metrics = metrics
        self.detector = Detector(
            DetectorConfig(
                node_name=settings.node_name,
                state_file=settings.state_file,
                boot_id_file=settings.boot_id_file,
                expected_gpus=settings.expected_gpus,
                dedupe_seconds=settings.xid_dedupe_seconds,
                resource_prefix=settings.gpu_resource_prefix,
                device_id_strategy=settings.device_id_strategy,
            ),
            metrics,
            lookup_bus=self._lookup_bus,
        )
        self.kmsg: KmsgReader | None = None
        self.events: NvmlXidWatcher | None = None

    def _lookup_bus(self, bus_id: str) -> GpuRecord | None:
        """The GPU at a PCI address (called from the kernel log thread; NVML is thread-safe)."""
        try:
            return read_gpu_record(self.nvml, self.nvml.handle_by_pci_bus_id(bus_id))
        except NvmlError as exc:
            log.info("detector: NVML knows no GPU at %s (%s)", bus_id, exc)
            return None

    async def start(self) -> None:
        await self.refresh()
        if self.settings.kmsg_path:
            self.kmsg = KmsgReader(
                Path(self.settings.kmsg_path),
                self._line,
                self.detector.end_batch,
                on_overrun=self.metrics.kmsg_overruns.inc,
                on_oversize=self._oversize,
            )
            self.kmsg.start()
        if self.settings.nvml_events:
            self.events = NvmlXidWatcher(self.detector.handle_nvml)
            self.events.start()

    def _oversize(self, size: int) -> None:
        self.detector.refuse("oversize", f"a kernel log line longer than {MAX_LINE} bytes ({size} read), to its end")

    def _line(self, line: str) -> None:
        self.metrics.kmsg_lines.inc()
        self.detector.handle_line(line)

    async def stop(self) -> None:
        for source in (self.kmsg, self.events):
            if source is not None:
                source.stop()

    async def refresh(self) -> None:
        """Re-read every GPU and the kubelet's allocations into the detector's gauges."""
        allocations: list[PodAllocation] | None
        try:
            allocations = await self.podresources.list()
        except Problem as exc:
            log.debug("detector: no allocations: %s", exc.error)
            allocations = None

        def read() -> NodeHealth:
            if not self.nvml.initialized:
                self.nvml.init()
            return read_node_health(self.nvml)

        try:
            health = await self.worker.run(read)
        except NvmlError as exc:
            log.warning("detector: GPU health unavailable: %s", exc)
        else:
            self.detector.observe(health, allocations)
        self.metrics.detector_sources.labels(KMSG).set(int(self.kmsg is not None and self.kmsg.running
                                                            and self.kmsg.error is None))
        self.metrics.detector_sources.labels(NVML_EVENTS).set(int(self.events is not None and self.events.running))
