"""NVIDIA's decode of the Xids whose immediate action depends on the message, as pure functions (no I/O).

It lives outside remediator.definitions so that the node agent (remediator.sidecar) can import it without
the definitions' loader and its libraries (YAML, Jinja, CEL): the agent decodes each Xid line it reads into
the `xid_action` label of its counter, the controller decodes the message an alert carries, and the same
text gives the same action wherever it is read. Standard library only (an import-linter contract holds it).

The Xid catalog gives most codes one immediate action. Five buckets instead ask for the message to be read:
WORKFLOW_NVLINK5_ERR (144-150: the sub-component name, intrInfo and errorStatus, NVIDIA's "XID 144-150 Decode"
sheet), WORKFLOW_NVLINK_ERR (74: the NVLink error registers, NVIDIA's bit list for Hopper), WORKFLOW_XID_45
(solo: restart Fabric Manager; after another Xid: follow that one), XID_154 (the recovery action the driver
names) and, inside the 144-150 sheet, XID_154_EVAL (take the action of an Xid 154 seen with it, else restart
the application). `decoded_action` turns (code, message) into the action the message asks for; None means
the code needs no decode or the message does not carry what the decode reads, and the catalog's bucket
stands. `recovery_action_from_message` reads the recovery action an Xid 154 names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DECODED_ACTIONS",
    "DECODED_CODES",
    "NVLINK5_DECODE",
    "RECOVERY_ACTIONS",
    "Nvlink5Row",
    "decode_nvlink5",
    "decode_xid45",
    "decode_xid74",
    "decode_xid154",
    "decoded_action",
    "recovery_action_from_message",
]

# What a decode can answer besides the catalog's buckets: Xid 154's recovery actions and NVIDIA's own words.
DECODED_ACTIONS: tuple[str, ...] = (
    "RESET_GPU",
    "RESTART_BM",
    "RESTART_APP",
    "IGNORE",
    "CONTACT_SUPPORT",
    "CHECK_MECHANICALS",
    "RESTART_FM",
    "XID_154_EVAL",
    "DRAIN_AND_RESET",
    "DRAIN_P2P",
)
DECODED_CODES: frozenset[int] = frozenset({45, 74, 154, *range(144, 151)})

ANY_STATUS = -1

RECOVERY_ACTIONS: tuple[str, ...] = ("GPU_RESET", "NODE_REBOOT", "DRAIN_P2P", "DRAIN_AND_RESET")

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


@dataclass(frozen=True)
class Nvlink5Row:
    """One row of NVIDIA's "XID 144-150 Decode" sheet.

    `names` are the sub-component's spellings before R575 and from R575 on; `v1`/`v2` the intrInfo bit
    patterns (V1: bits 9:0, the sub-component in 9:5; V2: bits 6:0); `status` the errorStatus (ANY_STATUS
    where the sheet gives none); `field` the 6-bit link-event field (V1 bits 19:14, V2 bits 17:12) for
    149's link events; `action2` the action when intrInfo has the promotion bit (V1 bit 10, V2 bit 7).
    """

    xid: int
    names: tuple[str, ...]
    v1: int
    v2: int
    status: int
    action: str
    field: int | None = None
    action2: str | None = None


def _rows(
    xid: int,
    names: tuple[str, ...],
    v1: str,
    v2: str,
    actions: dict[int, str],
    field: int | None = None,
    action2: str | None = None,
) -> list[Nvlink5Row]:
    return [
        Nvlink5Row(xid, names, int(v1, 2), int(v2, 2), status, action, field, action2)
        for status, action in actions.items()
    ]


_I, _R, _E = "IGNORE", "RESET_GPU", "XID_154_EVAL"
_SW = 0x80000000
_TLW = {0x1: _I, 0x2: _I, 0x4: _R, _SW: _I}
_LINK_EVT_RESET = (0b000000, 0b000001, 0b000010, 0b000100, 0b001010, 0b001111, 0b010000, 0b010001, 0b010010,
                   0b010101, 0b010110, 0b100000, 0b100001, 0b100010, 0b100011, 0b100100, 0b100101, 0b101010,
                   0b101011)
_LINK_EVT_IGNORE = (0b100110, 0b101000)

NVLINK5_DECODE: tuple[Nvlink5Row, ...] = (
    *_rows(144, ("SAW_MVB",), "0000100001", "0000001", {0x1: _I, 0x2: _R, 0x4: _I, 0x8: _I, 0x10: _R, 0x20: _I}),
    *_rows(145, ("RLW_CTRL",), "0001100010", "0000011", {_SW: _I}),
    *_rows(145, ("RLW_REMAP",), "0010000010", "0000100",
           {0x1: _E, 0x2: _E, 0x4: _E, 0x8: _E, 0x10: _E, 0x20: _E, 0x40: _R, 0x80: _R, 0x100: _I, 0x200: _I,
            _SW: _I}),
    *_rows(145, ("RLW_RSPCOL",), "0010100010", "0000101", {0x1: _I, 0x2: _R, _SW: _I}),
    *_rows(145, ("RLW_RXPIPE",), "0011000010", "0000110", {0x1: _I, 0x2: _I, 0x4: _I}, action2=_R),
    *_rows(145, ("RLW_RXPIPE",), "0011000010", "0000110", {0x8: _I, _SW: _I}),
    *_rows(145, ("RLW_SRC_TRACK",), "0011100010", "0000111",
           {0x1: _R, 0x2: _I, 0x4: _E, 0x8: _E, 0x10: _R, 0x20: _R, _SW: _I}),
    *_rows(145, ("RLW_TAGSTATE",), "0100000010", "0001000",
           {0x1: _I, 0x2: _R, 0x10000: _I, 0x20000: _R, 0x100000: _R, _SW: _I}),
    *_rows(146, ("TLW_CTRL",), "0100100011", "0001001", _TLW),
    *_rows(146, ("TLW_RX", "TLW_RX_PIPE0"), "0101000011", "0001010", _TLW),
    *_rows(146, ("TLW_RX", "TLW_RX_PIPE1"), "0101000011", "0001011", _TLW),
    *_rows(146, ("TLW_TX", "TLW_TX_PIPE0"), "0101100011", "0001100", _TLW),
    *_rows(146, ("TLW_TX", "TLW_TX_PIPE1"), "0101100011", "0001101", _TLW),
    *_rows(147, ("TREX",), "0110000100", "0001110", {0x1: _I, _SW: _I}),
    *_rows(148, ("NVLPW_CTRL", "NVLPW"), "0000000101", "0001111", {_SW: _I}),
    *_rows(149, ("NETIR", "NETIR_INT"), "0000000110", "0011000", {ANY_STATUS: _R}),
    *[row for f in _LINK_EVT_RESET
      for row in _rows(149, ("NETIR_LINK_EVT", "NETIR_LINK_DOWN"), "0111000110", "0010001", {ANY_STATUS: _R},
                       field=f)],
    *[row for f in _LINK_EVT_IGNORE
      for row in _rows(149, ("NETIR_LINK_EVT", "NETIR_LINK_DOWN"), "0111000110", "0010001", {ANY_STATUS: _I},
                       field=f)],
    *_rows(149, ("NETIR_BER_EVENT",), "1000100110", "0010011", {0x0: _I, 0x1: _I, 0x2: _I, 0x3: _I}),
    *_rows(149, ("NETIR_MFDE_EVENT",), "1001000110", "0010100", {0x1: _R, 0x3: _I, 0x4: _R, 0x5: _R, 0x7: _R}),
    *_rows(150, ("MSE", "MSE_DEGRADED", "MSE_WATCHDOG"), "0000000000", "0000000",
           {0x0: _R, 0xFFFFFFFF: _R}),
)

# "<SUB> <Fatal|Nonfatal> XC0 i0 Link 13 (0x0409a0c2 0x00000008 ...)"; the driver pads with several spaces.
_NVLINK5 = re.compile(
    r"(?P<name>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Non-?fatal)\b[^(]*\(\s*(?P<intr>0x[0-9a-fA-F]+)[\s,]+"
    r"(?P<status>0x[0-9a-fA-F]+)",
    re.I,
)


def _v1(intr: int) -> int:
    return intr & 0x3FF


def _v2(intr: int) -> int:
    return intr & 0x7F


def _field(intr: int, v1: bool) -> int:
    return (intr >> 14) & 0x3F if v1 else (intr >> 12) & 0x3F


def decode_nvlink5(code: int, message: str) -> str | None:
    """The immediate action NVIDIA's 144-150 decode gives for this message, or None when the message has no
    sub-component with intrInfo and errorStatus. A combination the sheet does not list is CONTACT_SUPPORT
    (NVIDIA: report what the decode does not cover), unless the driver printed it Fatal: then RESET_GPU, the
    action of every Fatal row of the sheet."""
    m = _NVLINK5.search(message or "")
    if m is None:
        return None
    name = m.group("name").upper()
    intr, status = int(m.group("intr"), 16), int(m.group("status"), 16)
    rows = [row for row in NVLINK5_DECODE if row.xid == code]
    named = [row for row in rows if name in row.names]
    candidates = named or [row for row in rows if _v1(intr) == row.v1 or _v2(intr) == row.v2]
    for row in candidates:
        is_v1 = _v1(intr) == row.v1 or _v2(intr) != row.v2
        if row.status not in (ANY_STATUS, status):
            continue
        if row.field is not None and _field(intr, is_v1) != row.field:
            continue
        if row.action2 is not None and intr & ((1 << 10) if is_v1 else (1 << 7)):
            return row.action2
        return row.action
    return "RESET_GPU" if m.group("sev").lower() == "fatal" else "CONTACT_SUPPORT"


# NVIDIA's WORKFLOW_NVLINK_ERR: the registers valid on Hopper (first, third, fourth, fifth) and what each bit
# asks for. Anything else set: "If bits other than those specifically outlined below are seen, please report
# a bug".
_IGN, _SYMP, _MECH, _BUG = "ignore", "sympathetic", "mechanical", "report"
_XID74_BITS: dict[int, dict[int, str]] = {
    0: {0: _IGN, 23: _IGN, 30: _IGN, 1: _SYMP, 20: _SYMP, 4: _BUG, 5: _BUG,
        **{b: _MECH for b in (8, 9, 12, 16, 17, 24, 28, 21, 22)}, 27: _BUG, 29: _BUG},
    2: {0: _BUG, 1: _BUG, 2: _BUG, 6: _BUG, 13: _BUG, 16: _BUG, 19: _BUG, 17: _BUG, 18: _BUG},
    3: {16: _SYMP, 17: _SYMP, 18: _SYMP},
    4: {**{b: _BUG for b in (18, 19, 21, 22, 24, 25, 27, 28)}, **{b: _IGN for b in (20, 23, 26, 29)}},
}
_XID74 = re.compile(r"\(\s*(0x[0-9a-fA-F]+(?:\s*,\s*0x[0-9a-fA-F]+){6})\s*\)")


def decode_xid74(message: str) -> str | None:
    """NVIDIA's decode of an Xid 74 message's seven NVLink registers: CHECK_MECHANICALS when a bit asks for
    the link's mechanical connections (or marginal signal integrity), CONTACT_SUPPORT when a bit asks for a
    bug report (ECC/parity, not-in-production, repeated errors, field diagnostics) or is not in NVIDIA's list
    or the registers are all zero, IGNORE when every set bit can be ignored. Sympathetic bits follow the
    others; alone they are CONTACT_SUPPORT. None when the message carries no seven registers."""
    m = _XID74.search(message or "")
    if m is None:
        return None
    regs = [int(v, 16) for v in re.split(r"\s*,\s*", m.group(1))]
    kinds: set[str] = set()
    for index, value in enumerate(regs):
        known = _XID74_BITS.get(index, {})
        for bit in range(32):
            if value >> bit & 1:
                kinds.add(known.get(bit, _BUG))
    if _MECH in kinds:
        return "CHECK_MECHANICALS"
    if _BUG in kinds or not kinds or kinds == {_SYMP}:
        return "CONTACT_SUPPORT"
    return "IGNORE"


_PREVIOUS = re.compile(r"\bcaused\s+by\s+previous\s+Xid\s+\d+", re.I)
# The channel the driver names on every Xid 45 line ("..., name=python3, Ch 00000001"): the mark of the
# driver's own text. dcgm-exporter's err_msg is its description of the code ("Preemptive cleanup, due to
# previous errors -- ..."), which says nothing about this Xid's neighbours and is not decoded.
_CHANNEL = re.compile(r"\bCh\s+[0-9a-fA-F]{4,}\b")


def decode_xid45(message: str) -> str | None:
    """WORKFLOW_XID_45: "Not Solo: IGNORE (follow other Xid)" when the driver says which Xid caused it,
    "Solo: RESTART_FM" when the driver's line names its channel and no cause; None without the driver's
    text (no message, or a description of the code such as dcgm-exporter's err_msg)."""
    if not message or not message.strip():
        return None
    if _PREVIOUS.search(message):
        return "IGNORE"
    return "RESTART_FM" if _CHANNEL.search(message) else None


_RECOVERY = {"GPU_RESET": "RESET_GPU", "NODE_REBOOT": "RESTART_BM", "DRAIN_P2P": "DRAIN_P2P",
             "DRAIN_AND_RESET": "DRAIN_AND_RESET"}
_TO_NONE = re.compile(r"\bto\s+(?:0x0+\s*)?\(\s*none\s*\)", re.I)


def decode_xid154(message: str) -> str | None:
    """XID_154: the recovery action the driver names (GPU Reset Required -> RESET_GPU, Node Reboot Required
    -> RESTART_BM, Drain P2P, Drain and Reset); IGNORE when it changed to None; None without an action."""
    action = recovery_action_from_message(message or "")
    if action is not None:
        return _RECOVERY[action]
    return "IGNORE" if _TO_NONE.search(message or "") else None


def decoded_action(code: int, message: str | None) -> str | None:
    """The immediate action `message` asks for, for the codes NVIDIA decodes from their message (45, 74,
    144-150, 154); None for every other code and whenever the message does not carry what the decode reads
    (the catalog's bucket then stands)."""
    text = message or ""
    if code == 45:
        return decode_xid45(text)
    if code == 74:
        return decode_xid74(text)
    if code == 154:
        return decode_xid154(text)
    if 144 <= code <= 150:
        return decode_nvlink5(code, text)
    return None
