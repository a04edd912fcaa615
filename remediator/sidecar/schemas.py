"""The wire format of the sidecar's validation gate, diagnostics and GPU identity, shared by the sidecar and
its client.

The sidecar builds these models and the controller's `SidecarClient` parses its answers with the same
classes, so a field renamed on one side fails the type check and the tests on the other. The module holds
nothing but pydantic models (no NVML, no HTTP), which is why the adapters may import it.

A check's `verdict` is one of:
- `pass`: the value is within its threshold;
- `fail`: it is not (the GPU must not take work);
- `not_applicable`: this GPU or driver cannot report it (e.g. retired pages on GPUs that remap rows), or
  the check was not asked for (e.g. no aggregate ECC baseline given);
- `error`: the value could not be read. An error counts against the gate like a failure: a check that
  could not be read proves nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BLOCKING_VERDICTS",
    "Check",
    "DcgmRun",
    "DcgmTest",
    "DcgmWarning",
    "DiagnosticsReport",
    "DiagnosticsRequest",
    "GpuIdentity",
    "RemappedRowCounts",
    "ValidateRequest",
    "ValidationReport",
    "Verdict",
]

Verdict = Literal["pass", "fail", "not_applicable", "error"]
# Verdicts that make the gate fail.
BLOCKING_VERDICTS: frozenset[str] = frozenset({"fail", "error"})


class ValidateRequest(BaseModel):
    """Body of `POST /v1/gpus/{id}/validate` (every field optional)."""

    model_config = ConfigDict(extra="forbid")

    # `dcgmi diag -r <level>`: 1 quick software checks (seconds), 2 adds PCIe and memory tests (minutes;
    # recommended for a GPU coming back from a reset), 3 and 4 longer stress tests.
    dcgm_level: int = Field(default=1, ge=1, le=4)
    # Without dcgmi on the node: true fails the gate, false passes it with the DCGM check not_applicable.
    require_dcgm: bool = False
    # Seconds before dcgmi is stopped (SIGTERM to its process group, SIGKILL after a grace period);
    # the sidecar's DCGM_DIAG_TIMEOUT when absent.
    dcgm_timeout_seconds: float | None = Field(default=None, gt=0, le=4 * 3600)
    # Aggregate (lifetime) uncorrectable ECC count recorded before the fault, e.g. from the inventory at
    # quarantine time; the gate fails when the count has grown since. Not checked when absent.
    aggregate_uncorrectable_baseline: int | None = Field(default=None, ge=0)
    # The GPU must be at least this many degrees C below its slowdown threshold.
    temperature_margin_c: int = Field(default=10, ge=0, le=60)


class Check(BaseModel):
    """One check of the gate: what was read, what it was compared with, and the outcome."""

    name: str
    verdict: Verdict
    value: Any = None
    # The limit (`threshold`) or the value wanted (`expected`); one of them or neither.
    threshold: Any = None
    expected: Any = None
    detail: str = ""
    # Set on a pass that deserves a look (e.g. a PCIe generation lowered while the GPU idles).
    warning: str | None = None


class DcgmWarning(BaseModel):
    """One error DCGM reported for a test (`warnings[]` in `dcgmi diag -j`)."""

    warning: str
    error_id: int | None = None
    error_category: int | None = None
    error_severity: int | None = None


class DcgmTest(BaseModel):
    """One DCGM diagnostic test as it applies to this GPU."""

    category: str
    name: str
    # DCGM's own word: Pass, Fail, Skip, Warn, Not Run.
    status: str
    verdict: Verdict
    warnings: list[DcgmWarning] = Field(default_factory=list)
    info: list[str] = Field(default_factory=list)


class DcgmRun(BaseModel):
    """What became of `dcgmi diag` for this GPU."""

    available: bool
    # Why it did not run, or ran without a usable result (not found, timed out, runtime error, bad JSON).
    error: str | None = None
    path: str | None = None
    argv: list[str] = Field(default_factory=list)
    level: int
    timeout_seconds: float
    exit_code: int | None = None
    timed_out: bool = False
    duration_seconds: float | None = None
    # DCGM's version from the JSON metadata, when it says.
    version: str | None = None
    tests: list[DcgmTest] = Field(default_factory=list)


class ValidationReport(BaseModel):
    """Answer of `POST /v1/gpus/{id}/validate`: `verdict` is pass only when no check failed or errored."""

    gpu: str
    uuid: str | None
    index: int | None
    verdict: Literal["pass", "fail"]
    # Names of the checks with a blocking verdict, in check order.
    failed: list[str]
    checks: list[Check]
    dcgm: DcgmRun
    checked_at: datetime
    duration_seconds: float


class DiagnosticsRequest(BaseModel):
    """Body of `POST /v1/diagnostics` (every field optional)."""

    model_config = ConfigDict(extra="forbid")

    # Seconds before nvidia-bug-report.sh is stopped; the sidecar's DIAGNOSTICS_TIMEOUT when absent.
    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)
    # Pass --safe-mode: skip the parts of the report that may hang on a GPU in a bad state.
    safe_mode: bool = True


class DiagnosticsReport(BaseModel):
    """Answer of `POST /v1/diagnostics`: where the bug report lies on the node, or why there is none."""

    available: bool
    # Why there is no (complete) report: "not available: ..." when the script is missing, a timeout, an exit
    # status; empty when all went well.
    detail: str = ""
    argv: list[str] = Field(default_factory=list)
    path: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    # The report was cut at DIAGNOSTICS_MAX_BYTES (the script was stopped, the file shortened).
    truncated: bool = False
    timed_out: bool = False
    exit_code: int | None = None
    started_at: datetime | None = None
    duration_seconds: float | None = None
    # The last lines the script printed (at most 2,000 characters).
    output_tail: str = ""


class RemappedRowCounts(BaseModel):
    """nvmlDeviceGetRemappedRows: rows remapped for correctable / uncorrectable errors, a remap waiting for the
    next reset, a remap that failed (no spare row left: the memory cannot be repaired)."""

    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


class GpuIdentity(BaseModel):
    """Answer of `GET /v1/gpus/{id}/identity`: what a replacement (RMA) request names about one GPU.

    A field NVML could not read is null and named in `unreadable` with the NVML error (e.g.
    `{"serial": "NOT_SUPPORTED"}`), so one unreadable field never hides the others.
    `retired_pages_pending` is NOT_SUPPORTED on GPUs that remap rows instead (A100 and later).
    """

    # The UUID or index asked for.
    gpu: str
    uuid: str | None = None
    index: int | None = None
    # The model, e.g. "NVIDIA H200".
    name: str | None = None
    serial: str | None = None
    board_part_number: str | None = None
    vbios_version: str | None = None
    pci_bus_id: str | None = None
    driver_version: str | None = None
    remapped_rows: RemappedRowCounts | None = None
    retired_pages_pending: bool | None = None
    # Field name -> NVML error name for every field left null.
    unreadable: dict[str, str] = Field(default_factory=dict)
    read_at: datetime | None = None
