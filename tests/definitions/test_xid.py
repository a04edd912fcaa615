"""The shipped Xid catalog's lookups and texts; Xid 154 messages are parsed (NVIDIA's column itself:
test_xid_catalog_nvidia.py)."""

from __future__ import annotations

import pytest

from remediator.definitions.datafiles import parse_xid_catalog
from remediator.definitions.loader import BUNDLED_RULES
from remediator.definitions.source import Problems, parse_yaml
from remediator.definitions.xid import XidCatalog, recovery_action_from_message


@pytest.fixture(scope="module")
def catalog() -> XidCatalog:
    problems = Problems()
    path = BUNDLED_RULES / "xid-catalog.yaml"
    doc = parse_yaml(path.read_text(), str(path), problems)
    assert doc is not None
    result = parse_xid_catalog(doc, problems)
    assert not problems, problems.errors
    return result


@pytest.mark.parametrize("code", [999, 0, 173, 500])
def test_unknown_codes_contact_support(catalog: XidCatalog, code: int) -> None:
    assert catalog.lookup(code).resolution == "CONTACT_SUPPORT"


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (13, "graphics engine exception"),
        (31, "page fault"),
        (43, "stopped processing"),
        (45, "preemptive cleanup"),
        (48, "double bit ecc"),
        (63, "remapping event"),
        (64, "remapping failure"),
        (74, "nvlink"),
        (79, "fallen off the bus"),
        (92, "single-bit ecc"),
        (94, "contained memory error"),
        (95, "uncontained memory error"),
        (119, "gsp rpc timeout"),
        (120, "gsp error"),
    ],
)
def test_well_known_descriptions(catalog: XidCatalog, code: int, words: str) -> None:
    assert words in catalog.lookup(code).description.lower()


def test_xid_154_is_its_own_bucket(catalog: XidCatalog) -> None:
    assert catalog.lookup(154).resolution == "XID_154"


@pytest.mark.parametrize(
    ("message", "action"),
    [
        ("Xid 154 GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "NODE_REBOOT"),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "GPU_RESET"),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", "DRAIN_P2P"),
        ("GPU recovery action changed from 0x3 (Drain P2P) to 0x4 (Drain and Reset)", "DRAIN_AND_RESET"),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", None),
        ("recovery action changed to 0x2", "NODE_REBOOT"),
        ("recovery action: DRAIN_AND_RESET", "DRAIN_AND_RESET"),
        ("NVML_GPU_RECOVERY_ACTION_GPU_RESET", "GPU_RESET"),
        ("Xid 79: GPU has fallen off the bus", None),
        ("", None),
    ],
)
def test_recovery_action_from_message(message: str, action: str | None) -> None:
    assert recovery_action_from_message(message) == action
