"""Prometheus metrics of one sidecar app, on its own registry so several apps can share a process.

Per-GPU gauges are refreshed from each inventory read (a scrape of /metrics reads the inventory first);
request counts and latency come from a middleware; NVML call errors from the `Nvml` observer hook.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from remediator.sidecar.nvml import error_name

__all__ = ["SidecarMetrics"]


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

    def observe_nvml(self, function: str, seconds: float, code: int | None) -> None:
        if code is not None:
            self.nvml_errors.labels(function, error_name(code)).inc()

    def observe_gpus(self, gpus: Iterable[dict[str, Any]]) -> None:
        for gpu in gpus:
            if "uuid" not in gpu:
                continue
            key = (gpu["uuid"], str(gpu["index"]))
            for gauge, field in (
                (self.temperature, "temperature_c"),
                (self.power, "power_draw_watts"),
                (self.limit, "power_limit_watts"),
            ):
                if gpu.get(field) is not None:
                    gauge.labels(*key).set(gpu[field])

    def render(self) -> bytes:
        return generate_latest(self.registry)
