"""Node sidecar settings, validated once when `remediator sidecar` starts.

The sidecar runs on every GPU node as a DaemonSet and needs its own small set of keys (where the kubelet
socket and the power-limit state file live, how the device plugin names GPUs, how to reset one); they
share the controller's `REMEDIATOR_` environment prefix so one ConfigMap can feed both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from remediator.settings import TcpPort

__all__ = ["SidecarSettings"]


class SidecarSettings(BaseSettings):
    """Everything the node agent can be told (environment, prefix REMEDIATOR_)."""

    model_config = SettingsConfigDict(env_prefix="REMEDIATOR_", extra="ignore", validate_default=True)

    sidecar_token: str | None = None
    sidecar_port: TcpPort = 9410
    podresources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    # The kubelet device manager's checkpoint: ties PodResources allocations to pod UIDs.
    device_checkpoint: Path = Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
    state_file: Path = Path("/var/lib/gpu-remediator/power-state.json")
    # How the NVIDIA device plugin names GPUs in PodResources: `uuid` (GPU-.../MIG-...) or `index` (0, 1).
    device_id_strategy: Literal["uuid", "index"] = "uuid"
    # Resource names treated as GPUs in PodResources (the device plugin's, MIG strategies included).
    gpu_resource_prefix: str = "nvidia.com/"
    proc_root: Path = Path("/proc")
    nvidia_smi: Path = Path("/usr/bin/nvidia-smi")
    reset_method: Literal["nvml", "nvidia-smi"] = "nvml"
    # Seconds allowed for one PodResources List call and for one nvidia-smi reset.
    podresources_timeout: float = 5.0
    reset_timeout: float = 120.0
    # Seconds the post-reset check waits for the GPU to reappear.
    reset_settle_seconds: float = 10.0
    # The validation gate's DCGM diagnostic: dcgmi's path (unset: `dcgmi` on PATH) and the seconds a
    # diagnostic may take when the request names no timeout (level 2 takes minutes).
    dcgmi: Path | None = None
    dcgm_diag_timeout: float = Field(default=900.0, gt=0)
    # nvidia-bug-report.sh (unset: on PATH), where its reports are kept, and their time and size bounds.
    nvidia_bug_report: Path | None = None
    diagnostics_dir: Path = Path("/var/lib/gpu-remediator/diagnostics")
    diagnostics_timeout: float = Field(default=600.0, gt=0)
    diagnostics_max_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    # -- the node detector (docs/sidecar.md, "Node detector") --
    # The node's name as the `Hostname` label of the detector's series (downward API spec.nodeName);
    # empty: the host name.
    node_name: str = ""
    # The kernel log the Xid/SXid reader follows; a file or FIFO works too; empty turns the reader off.
    kmsg_path: str = "/dev/kmsg"
    # Where the kernel's boot id is read: kernel record numbers restart at each boot.
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")
    # Use NVML event sets (Xid critical errors) as a second Xid source where the driver supports them.
    nvml_events: bool = True
    # Reports of one (GPU, Xid) by the kernel log and by NVML within this many seconds are one event.
    xid_dedupe_seconds: float = Field(default=10.0, ge=0, le=3600)
    # GPUs this node should have (its nvidia.com/gpu capacity); unset: the GPUs seen since the first start.
    expected_gpus: int | None = Field(default=None, ge=0, le=1024)

    @field_validator("sidecar_token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        return value or None

    @field_validator("dcgmi", "nvidia_bug_report", mode="before")
    @classmethod
    def _unset_path(cls, value: object) -> object:
        return None if value == "" else value
