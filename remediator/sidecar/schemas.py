"""The wire format of every sidecar endpoint, shared by the sidecar (remediator.sidecar.app) and its client
(remediator.adapters.sidecar.SidecarClient).

The sidecar answers through these models and the controller's client builds its requests and parses the
answers with the same classes, so a field renamed on one side fails the type check and the tests on the
other. The module holds nothing but pydantic models and their validators (no NVML, no HTTP): import-linter
keeps it pure, and it is the only module of the sidecar package the controller may import.

Requests forbid unknown fields (a typo is a 422, not a silently ignored setting); answers ignore them, so a
newer sidecar can add a field without breaking an older controller. The sidecar serialises answers without
the fields it did not set (`exclude_unset`), so an optional field a route leaves out stays out of the JSON.

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
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

__all__ = [
    "BLOCKING_VERDICTS",
    "Check",
    "DcgmRun",
    "DcgmTest",
    "DcgmWarning",
    "DiagnosticsReport",
    "DiagnosticsRequest",
    "DryRunRequest",
    "EccCounts",
    "EccState",
    "GateVerdict",
    "GpuIdentity",
    "GpuInventory",
    "GpuPod",
    "GpuPods",
    "GpuSnapshot",
    "Health",
    "MigState",
    "OneOfWattsOrPercent",
    "PodContainer",
    "PostCheck",
    "PowerLimitAnswer",
    "PowerLimitRequest",
    "PowerRestoreAnswer",
    "ProblemAnswer",
    "ProcessOwner",
    "ProcessUsage",
    "RemappedRowCounts",
    "ResetAnswer",
    "ValidateRequest",
    "ValidationReport",
]

GateVerdict = Literal["pass", "fail", "not_applicable", "error"]
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
    verdict: GateVerdict
    value: object = None
    # The limit (`threshold`) or the value wanted (`expected`); one of them or neither.
    threshold: object = None
    expected: object = None
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
    verdict: GateVerdict
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


# ---------------------------------------------------------------------------------------- refusals


class ProblemAnswer(BaseModel):
    """The body of every answer other than 2xx: what went wrong and the NVML error behind it, if any.

    Further fields depend on the refusal (`processes` of a 409 for a GPU in use, the allowed range of a 422
    for a power limit out of range, the fields of a 422 for a malformed request); they are kept as sent.
    """

    model_config = ConfigDict(extra="allow")

    error: str | None = None
    nvml_error: str | None = None


# ---------------------------------------------------------------------------------------- inventory


class EccCounts(BaseModel):
    """ECC error counts of one kind (volatile: since the last driver load; aggregate: lifetime)."""

    corrected: int | None = None
    uncorrected: int | None = None


class EccState(BaseModel):
    enabled: bool | None = None
    pending: bool | None = None
    volatile: EccCounts
    aggregate: EccCounts


class MigState(BaseModel):
    current: bool | None = None
    pending: bool | None = None
    # UUIDs of the MIG devices while MIG is on.
    devices: list[str] = Field(default_factory=list)


class ProcessUsage(BaseModel):
    """A compute process on a GPU, as NVML lists it."""

    pid: int
    used_memory_bytes: int | None = None


class GpuSnapshot(BaseModel):
    """One GPU of `GET /v1/gpus` (and `GET /v1/gpus/{uuid}`). Power values are watts.

    A GPU that did not answer appears with `index`, `error` and `nvml_error` only. A field the GPU cannot
    report is null and named in `notes` with the NVML error.
    """

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    temperature_c: int | None = None
    temperature_slowdown_c: int | None = None
    temperature_shutdown_c: int | None = None
    power_draw_watts: float | None = None
    power_limit_watts: float | None = None
    power_limit_default_watts: float | None = None
    power_limit_min_watts: float | None = None
    power_limit_max_watts: float | None = None
    power_limit_enforced_watts: float | None = None
    ecc: EccState | None = None
    retired_pages: int | None = None
    remapped_rows: RemappedRowCounts | None = None
    mig: MigState | None = None
    processes: list[ProcessUsage] = Field(default_factory=list)
    notes: dict[str, str] = Field(default_factory=dict)
    # The limit remembered before the sidecar's first change (restore puts it back); null when none.
    power_limit_original_watts: float | None = None
    # Why this GPU could not be read (then most fields above are absent).
    error: str | None = None
    nvml_error: str | None = None


class GpuInventory(BaseModel):
    """Answer of `GET /v1/gpus`: the node's GPUs with the driver and NVML versions."""

    driver_version: str | None = None
    nvml_version: str | None = None
    gpus: list[GpuSnapshot] = Field(default_factory=list)


class Health(BaseModel):
    """Answer of `GET /healthz`: NVML answers and sees `gpus` GPUs."""

    status: Literal["ok"]
    gpus: int


# ---------------------------------------------------------------------------------------- pods of a GPU


class ProcessOwner(ProcessUsage):
    """A compute process with the pod UID and container id its cgroup names (null for host processes)."""

    pod_uid: str | None = None
    container_id: str | None = None


class PodContainer(BaseModel):
    name: str
    resource: str
    # The kubelet device ids of this GPU (or MIG device) allocated to the container.
    device_ids: list[str]


class GpuPod(BaseModel):
    """A pod allocated the GPU; `active` when one of its processes runs on it (null: unknown)."""

    namespace: str
    name: str
    uid: str | None = None
    containers: list[PodContainer] = Field(default_factory=list)
    active: bool | None = None
    processes: list[ProcessUsage] = Field(default_factory=list)


class GpuPods(BaseModel):
    """Answer of `GET /v1/gpus/{uuid}/pods`: the pods allocated the GPU (or MIG device) and its processes."""

    # The GPU or MIG UUID asked for, and the GPU it is on.
    uuid: str | None = None
    gpu_uuid: str | None = None
    index: int | None = None
    pods: list[GpuPod] = Field(default_factory=list)
    processes: list[ProcessOwner] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------- power limit, reset


class DryRunRequest(BaseModel):
    """Body of `POST /v1/gpus/{uuid}/power-limit/restore` and `POST /v1/gpus/{uuid}/reset` (optional)."""

    model_config = ConfigDict(extra="forbid")

    # Say what would be done, do nothing.
    dry_run: bool = False


class ResetRequest(DryRunRequest):
    """Body of `POST /v1/gpus/{uuid}/reset` (optional)."""

    # Turn persistence mode off for the reset and back on after it. Persistence mode on (the driver keeps the
    # GPU open for nvidia-persistenced) is a holder the agent never turns off by itself: only a request that
    # says so (the reset step's operand handling) does, and the answer records it.
    persistence_off: bool = False


class OneOfWattsOrPercent(BaseModel):
    """The rule for a power limit target: exactly one of `watts` and `percent_of_default`.

    A base for the models that declare both fields (each with its own bounds): the sidecar's request and
    the `power_limit` action's parameters.
    """

    if TYPE_CHECKING:
        watts: float | None
        percent_of_default: float | None

    @model_validator(mode="after")
    def _exactly_one(self) -> OneOfWattsOrPercent:
        if (self.watts is None) == (self.percent_of_default is None):
            raise ValueError("give exactly one of watts or percent_of_default")
        return self


class PowerLimitRequest(OneOfWattsOrPercent):
    """Body of `POST /v1/gpus/{uuid}/power-limit`. A number keeps the form it was given in (50, not 50.0)."""

    model_config = ConfigDict(extra="forbid")

    dry_run: bool = False
    watts: int | float | None = Field(default=None, gt=0, le=10_000)
    percent_of_default: int | float | None = Field(default=None, gt=0, le=200)


class PowerLimitAnswer(BaseModel):
    """Answer of `POST /v1/gpus/{uuid}/power-limit` (watts; `changed` false when the limit was already so)."""

    uuid: str | None = None
    dry_run: bool = False
    previous_watts: float | None = None
    new_watts: float | None = None
    default_watts: float | None = None
    min_watts: float | None = None
    max_watts: float | None = None
    # The limit before the sidecar's first change, which a restore puts back.
    original_watts: float | None = None
    changed: bool = False
    message: str = ""


class PowerRestoreAnswer(BaseModel):
    """Answer of `POST /v1/gpus/{uuid}/power-limit/restore`.

    `left_alone`: the limit in force is neither the original nor the one the sidecar set (someone else's),
    so it stays; `current_watts`, `capped_watts` and `original_watts` say which is which.
    """

    uuid: str | None = None
    dry_run: bool = False
    previous_watts: float | None = None
    new_watts: float | None = None
    changed: bool = False
    restored: bool = False
    message: str = ""
    left_alone: bool = False
    reason: str | None = None
    current_watts: float | None = None
    capped_watts: float | None = None
    original_watts: float | None = None


class PostCheck(BaseModel):
    """What the GPU looked like after a reset: found again by UUID, volatile uncorrected ECC, temperature."""

    uuid: str
    found: bool
    index: int | None = None
    ecc_volatile_uncorrected: int | None = None
    temperature_c: int | None = None
    healthy: bool
    problems: list[str] = Field(default_factory=list)


class DeviceHolder(BaseModel):
    """A client that holds the GPU's device files (/proc/<pid>/fd), or `kind: persistence-mode` (no pid)."""

    pid: int | None = None
    program: str | None = None
    # process (a workload), dcgm-hostengine, dcgm-exporter, persistenced, device-plugin,
    # gpu-feature-discovery, fabric-manager, persistence-mode
    kind: str
    files: list[str] = Field(default_factory=list)
    pod_uid: str | None = None
    container_id: str | None = None


class ResetAnswer(BaseModel):
    """Answer of `POST /v1/gpus/{uuid}/reset` (a GPU in use is refused with 409 naming its `processes` and
    every `holders` entry)."""

    uuid: str | None = None
    dry_run: bool = False
    method: str | None = None
    processes: list[ProcessOwner] = Field(default_factory=list)
    changed: bool = False
    message: str = ""
    post_check: PostCheck | None = None
    healthy: bool | None = None
    # argv and output tail of `nvidia-smi --gpu-reset` (reset_method nvidia-smi).
    nvidia_smi: dict[str, JsonValue] | None = None
    # Persistence mode turned off for the reset (persistence_off) and whether it was turned back on.
    persistence_mode: dict[str, JsonValue] | None = None
