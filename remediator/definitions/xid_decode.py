"""NVIDIA's decode of the Xids whose immediate action depends on the message, where the definitions read it.

The decode itself lives in `remediator.domain.xid_decode` (standard library only) so the node agent can import it
without the definitions' loader; this module names it for the definitions' side, so the controller and the
agent run the one decode.
"""

from __future__ import annotations

from remediator.domain.xid_decode import (
    ANY_STATUS,
    DECODED_ACTIONS,
    DECODED_CODES,
    NVLINK5_DECODE,
    Nvlink5Row,
    decode_nvlink5,
    decode_xid45,
    decode_xid74,
    decode_xid154,
    decoded_action,
)

__all__ = [
    "ANY_STATUS",
    "DECODED_ACTIONS",
    "DECODED_CODES",
    "NVLINK5_DECODE",
    "Nvlink5Row",
    "decode_nvlink5",
    "decode_xid45",
    "decode_xid74",
    "decode_xid154",
    "decoded_action",
]
