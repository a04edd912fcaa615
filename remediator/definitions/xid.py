"""NVIDIA's Xid catalog as data: code -> immediate resolution bucket, cause and description.

The facts live in rules/xid-catalog.yaml so an SRE can update them when NVIDIA revises the catalog without
a code change; this module only reads them. Codes not in the file resolve to CONTACT_SUPPORT, as NVIDIA
advises for unknown Xids. Xid 154 carries no fault of its own: its message names the recovery action the
driver now wants for the GPU, which `recovery_action_from_message` (remediator.domain.xid_decode) extracts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from remediator.domain.xid_decode import RECOVERY_ACTIONS, recovery_action_from_message

__all__ = [
    "RECOVERY_ACTIONS",
    "RESOLUTIONS",
    "UNKNOWN_RESOLUTION",
    "XidCatalog",
    "XidInfo",
    "recovery_action_from_message",
]

UNKNOWN_RESOLUTION = "CONTACT_SUPPORT"

# NVIDIA's immediate-action resolution buckets.
RESOLUTIONS: tuple[str, ...] = (
    "CHECK_MECHANICALS",
    "CHECK_UVM",
    "CONTACT_SUPPORT",
    "IGNORE",
    "RESET_GPU",
    "RESTART_APP",
    "RESTART_BM",
    "RESTART_VM",
    "UPDATE_SWFW",
    "WORKFLOW_NVLINK5_ERR",
    "WORKFLOW_NVLINK_ERR",
    "WORKFLOW_XID_45",
    "WORKFLOW_XID_48",
    "XID_154",
)


@dataclass(frozen=True)
class XidInfo:
    """What NVIDIA says about one Xid code, and the bucket the controller acts on.

    `resolution` is that bucket: NVIDIA's published immediate action (`nvidia`) where there is one, else the
    project's own choice (`nvidia` None; `nvidia_note` then holds what NVIDIA writes in that column).
    """

    code: int
    resolution: str
    cause: str
    description: str
    mnemonic: str = ""
    nvidia: str | None = None
    nvidia_note: str = ""

    @property
    def chosen_by(self) -> str:
        """"nvidia" when the bucket is NVIDIA's published immediate action, "project" when chosen here."""
        return "nvidia" if self.nvidia is not None else "project"


@dataclass(frozen=True)
class XidCatalog:
    """Lookup over the catalog file; `lookup` never fails (unknown codes -> CONTACT_SUPPORT)."""

    entries: Mapping[int, XidInfo] = field(default_factory=dict)
    unknown_resolution: str = UNKNOWN_RESOLUTION

    def lookup(self, code: int) -> XidInfo:
        info = self.entries.get(code)
        if info is not None:
            return info
        return XidInfo(
            code=code,
            resolution=self.unknown_resolution,
            cause="unknown",
            description=f"Xid {code} is not in the catalog; contact support",
        )

    def codes(self, resolution: str) -> list[int]:
        """Every catalogued code in one resolution bucket, ascending."""
        return sorted(code for code, info in self.entries.items() if info.resolution == resolution)
