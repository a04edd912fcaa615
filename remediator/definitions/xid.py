"""NVIDIA's Xid catalog as data: code -> immediate resolution bucket, cause and description.

The facts live in rules/xid-catalog.yaml so an SRE can update them when NVIDIA revises the catalog without
a code change; this module only reads them. Codes not in the file resolve to CONTACT_SUPPORT, as NVIDIA
advises for unknown Xids. Xid 154 carries no fault of its own: its message names the recovery action the
driver now wants for the GPU, which `recovery_action_from_message` extracts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

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

RECOVERY_ACTIONS: tuple[str, ...] = ("GPU_RESET", "NODE_REBOOT", "DRAIN_P2P", "DRAIN_AND_RESET")


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


# The action after "to" in "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)".
_NAMED: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(r"(?<![a-z])drain[\s_]*(?:p2p[\s_]*)?and[\s_]*reset", re.I), "DRAIN_AND_RESET"),
    (re.compile(r"(?<![a-z])drain[\s_]*p2p\b", re.I), "DRAIN_P2P"),
    (re.compile(r"(?<![a-z])node[\s_]*reboot", re.I), "NODE_REBOOT"),
    (re.compile(r"(?<![a-z])gpu[\s_]*reset", re.I), "GPU_RESET"),
)
_BY_CODE: dict[int, str | None] = {
    0: None,
    1: "GPU_RESET",
    2: "NODE_REBOOT",
    3: "DRAIN_P2P",
    4: "DRAIN_AND_RESET",
}
_TO = re.compile(r"\bto\s+(?P<code>0x[0-9a-f]+)?\s*(?:\((?P<name>[^)]*)\))?", re.I)
_NONE = re.compile(r"^\s*none\s*$", re.I)


def _named(text: str) -> str | None:
    for pattern, action in _NAMED:
        if pattern.search(text):
            return action
    return None


def recovery_action_from_message(text: str) -> str | None:
    """The recovery action an Xid 154 message asks for: GPU_RESET, NODE_REBOOT, DRAIN_P2P or DRAIN_AND_RESET.

    Reads the action after "to" ("... changed from 0x0 (None) to 0x2 (Node Reboot Required)"), by name or
    by code; otherwise the first action named anywhere in the text. None when no action is named, or the
    new action is "None".
    """
    if not text:
        return None
    for m in _TO.finditer(text):
        name, code = m.group("name"), m.group("code")
        if name is not None:
            if _NONE.match(name):
                return None
            action = _named(name)
            if action is not None:
                return action
        if code is not None:
            return _BY_CODE.get(int(code, 16))
    return _named(text)
