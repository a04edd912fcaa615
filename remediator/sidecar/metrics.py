"""Prometheus metrics of one sidecar app, on its own registry so several apps can share a process.

Per-GPU gauges are refreshed from each inventory read (a scrape of /metrics reads the inventory first);
request counts and latency come from a middleware; NVML call errors from the `Nvml` observer hook.
The `gpu_remediator_*` families are the node detector's (see `detector.py`): Xid/SXid counters, GPUs
expected/visible/lost and the health fields DCGM does not export, labelled like dcgm-exporter's series
(`Hostname`, `UUID`, `gpu`, `pci_bus_id`, `modelName`) so rules can join and merge them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from remediator.sidecar.nvml import error_name

__all__ = ["HEALTH_GAUGES", "REFUSAL_REASONS", "NvlinkErrors", "SidecarMetrics", "replace_series"]

# Why the detector refused a kernel log line (remediator_sidecar_kernel_lines_refused_total{reason}).
REFUSAL_REASONS = ("facility", "unanchored", "oversize")
GPU_LABELS = ["Hostname", "UUID", "gpu", "pci_bus_id", "modelName"]
# Detector health gauge (without the gpu_remediator_ prefix) -> help text.
HEALTH_GAUGES = {
    "pcie_link_generation": "Current PCIe link generation of the GPU",
    "pcie_link_generation_max": "Highest PCIe link generation the GPU and its slot support",
    "pcie_link_width": "Current PCIe link width (lanes) of the GPU",
    "pcie_link_width_max": "Widest PCIe link the GPU and its slot support",
    "temperature_slowdown_celsius": "GPU temperature at which the GPU slows itself down (NVML threshold)",
    "temperature_shutdown_celsius": "GPU temperature at which the GPU shuts down (NVML threshold)",
    "recovery_action": "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0 none, 1 GPU reset, 2 node reboot, "
    "3 drain P2P, 4 drain and reset",
    "remapped_rows_pending": "1 while a row remap waits for a GPU reset",
    "remapped_rows_failure": "1 when a row remap failed (the GPU needs replacing)",
    "orphaned_memory_bytes": "Framebuffer used by compute processes on a GPU that no pod holds",
    # The readings the shipped rules fall back on where dcgm-exporter runs its default counters file.
    "ecc_uncorrected_volatile": "Uncorrected (double-bit) ECC errors since the driver loaded (NVML volatile "
    "count, as DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)",
    "ecc_corrected_volatile": "Corrected (single-bit) ECC errors since the driver loaded (NVML volatile count, "
    "as DCGM_FI_DEV_ECC_SBE_VOL_TOTAL)",
    "clock_event_reasons": "Bit mask of the active clock-event (throttle) reasons (NVML, as "
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS): 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake",
    "retired_pages_pending": "1 while memory pages wait to be retired at the next reset (NVML, as "
    "DCGM_FI_DEV_RETIRED_PENDING; absent on GPUs that remap rows instead)",
    "power_usage_watts": "GPU power draw in watts (NVML, as DCGM_FI_DEV_POWER_USAGE)",
    "power_limit_watts": "GPU power-management limit in watts (NVML, as DCGM_FI_DEV_POWER_MGMT_LIMIT)",
}


def replace_series(gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
    """Set `values` on `gauge` and remove every other label set it had (GPUs that went away)."""
    for labels, value in values.items():
        gauge.labels(*labels).set(value)
    wanted = {tuple(labels) for labels in values}
    for existing in list(gauge._metrics):  # prometheus_client keeps children by label tuple
        if tuple(existing) not in wanted:
            gauge.remove(*existing)


class NvlinkErrors(Collector):
    """gpu_remediator_nvlink_errors_total: NVML's per-link NVLink error counters, exported as counters.

    NVML keeps the counts (since the driver loaded, or since someone reset them: Prometheus' `increase` and
    `rate` read a drop as a counter reset), so each read replaces the whole set; a link that went down or a
    GPU that went away leaves with it.
    """

    NAME = "gpu_remediator_nvlink_errors"
    HELP = ("NVLink data-link errors per active link (NVML nvmlDeviceGetNvLinkErrorCounter; error: replay, recovery, "
            "crc_flit, crc_data; DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL are their sums over the links)")
    LABELS = (*GPU_LABELS, "link", "error")

    def __init__(self) -> None:
        self._values: dict[tuple[str, ...], float] = {}

    def replace(self, values: Mapping[tuple[str, ...], float]) -> None:
        for labels in values:
            if len(labels) != len(self.LABELS):
                raise ValueError(f"{self.NAME}: labels {labels!r} do not match {self.LABELS}")
        self._values = dict(values)  # one assignment: a concurrent scrape sees the old set or the new one

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.NAME, self.HELP, labels=list(self.LABELS))
        for labels, value in sorted(self._values.items()):
            family.add_metric(list(labels), value)
        yield family


class SidecarMetrics:
    """The sidecar's metric families."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["uuid", "index"]
        self.temperature = Gauge(
            "remediator_sidecar_gpu_temperature_celsius", "GPU temperature", labels, registry=self.registry
        )
        self.power = Gauge(
            "remediator_sidecar_gpu_power_draw_watts", "GPU power draw", labels, registry=self.registry
        )
        self.limit = Gauge(
            "remediator_sidecar_gpu_power_limit_watts",
            "GPU power limit in force",
            labels,
            registry=self.registry,
        )
        self.requests = Counter(
            "remediator_sidecar_requests_total",
            "HTTP requests served",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "remediator_sidecar_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=self.registry,
        )
        self.nvml_errors = Counter(
            "remediator_sidecar_nvml_errors_total",
            "NVML calls that returned an error",
            ["function", "error"],
            registry=self.registry,
        )

        # -- the node detector ----------------------------------------------------------------------
        self.xid_events = Counter(
            "gpu_remediator_xid_events",
            "Xid errors reported by the GPU driver (kernel log and NVML events, each event once; a GPU that "
            "fell off the bus counts as Xid 79 whether or not its line carries the Xid); gpu_instance and "
            "compute_instance name the MIG instance the driver attributes it to; xid_action is NVIDIA's decode "
            "of the line for 45, 74, 144-150 and 154 (empty where there is none)",
            [*GPU_LABELS, "xid", "gpu_instance", "compute_instance", "xid_action"],
            registry=self.registry,
        )
        self.sxid_events = Counter(
            "gpu_remediator_sxid_events",
            "SXid errors reported by the NVSwitch driver in the kernel log (link: the switch link the line names)",
            ["Hostname", "pci_bus_id", "sxid", "fatal", "link"],
            registry=self.registry,
        )
        self.kernel_events = Counter(
            "gpu_remediator_kernel_events",
            "GPU failures the driver reports in the kernel log without an Xid: fallen_off_bus, gpu_init_failed "
            "(RmInitAdapter failed), reset_required (NV_ERR_RESET_REQUIRED and siblings), nvlink_rx_detect "
            "(postRxDetLinkMask), nvlink_training_failed; GPU labels empty where the line names no GPU",
            [*GPU_LABELS, "kind"],
            registry=self.registry,
        )
        self.gpus_expected = Gauge(
            "gpu_remediator_gpus_expected",
            "GPUs this node should have (EXPECTED_GPUS, else the GPUs seen since the first start)",
            ["Hostname"],
            registry=self.registry,
        )
        self.gpus_visible = Gauge(
            "gpu_remediator_gpus_visible", "GPUs NVML lists that answer", ["Hostname"], registry=self.registry
        )
        self.gpu_lost = Gauge(
            "gpu_remediator_gpu_lost",
            "1 when a GPU this node had is lost (NVML says so, or it is no longer listed), else 0",
            ["Hostname", "UUID", "gpu", "pci_bus_id"],
            registry=self.registry,
        )
        self.health = {
            name: Gauge(f"gpu_remediator_{name}", text, GPU_LABELS, registry=self.registry)
            for name, text in HEALTH_GAUGES.items()
        }
        self.nvlink_errors = NvlinkErrors()
        self.registry.register(self.nvlink_errors)
        self.kmsg_overruns = Counter(
            "gpu_remediator_kmsg_overruns",
            "Times the kernel overwrote log records before the sidecar read them (EPIPE)",
            registry=self.registry,
        )
        self.kmsg_lines = Counter(
            "gpu_remediator_kmsg_lines", "Kernel log lines read", registry=self.registry
        )
        self.kernel_lines_refused = Counter(
            "remediator_sidecar_kernel_lines_refused",
            "Kernel log lines not counted as Xid/SXid: facility (an Xid line that did not come from the "
            "kernel), unanchored (Xid text inside another message), oversize (a line over 64 KiB, discarded)",
            ["reason"],
            registry=self.registry,
        )
        for reason in REFUSAL_REASONS:
            self.kernel_lines_refused.labels(reason)
        self.detector_sources = Gauge(
            "gpu_remediator_detector_source_up",
            "1 while a detector source (kmsg, nvml_events) is running",
            ["source"],
            registry=self.registry,
        )

    def observe_nvml(self, function: str, seconds: float, code: int | None) -> None:
        if code is not None:
            self.nvml_errors.labels(function, error_name(code)).inc()

    def observe_gpus(self, gpus: Iterable[Mapping[str, object]]) -> None:
        for gpu in gpus:
            if "uuid" not in gpu:
                continue
            key = (str(gpu["uuid"]), str(gpu["index"]))
            for gauge, field in (
                (self.temperature, "temperature_c"),
                (self.power, "power_draw_watts"),
                (self.limit, "power_limit_watts"),
            ):
                value = gpu.get(field)
                if isinstance(value, int | float):
                    gauge.labels(*key).set(value)

    def render(self) -> bytes:
        return generate_latest(self.registry)
