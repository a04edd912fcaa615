"""The shipped Xid catalog encodes NVIDIA's immediate resolution buckets; Xid 154 messages are parsed."""

from __future__ import annotations

import pytest

from remediator.definitions.datafiles import parse_xid_catalog
from remediator.definitions.loader import BUNDLED_RULES
from remediator.definitions.source import Problems, parse_yaml
from remediator.definitions.xid import XidCatalog, recovery_action_from_message


def _span(a: int, b: int) -> list[int]:
    return list(range(a, b + 1))


BUCKETS: dict[str, list[int]] = {
    "RESET_GPU": [46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 166, 169, 170, 171, 172],
    "WORKFLOW_XID_48": [48],
    "RESTART_BM": [79, 167],
    "RESTART_VM": [151],
    "WORKFLOW_XID_45": [45],
    "WORKFLOW_NVLINK_ERR": [74],
    "WORKFLOW_NVLINK5_ERR": _span(144, 150),
    "CHECK_MECHANICALS": [54],
    "UPDATE_SWFW": [78],
    "CHECK_UVM": [159],
    "CONTACT_SUPPORT": [165, 168],
    "RESTART_APP": [
        8,
        11,
        13,
        25,
        31,
        32,
        *_span(39, 41),
        60,
        *_span(68, 72),
        *_span(75, 77),
        80,
        *_span(82, 86),
        88,
        89,
        94,
        *_span(96, 105),
        *_span(126, 135),
        139,
    ],
    "IGNORE": [14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 121, 137, 141, 152, 153, 157, 160, 161, 162, 163, 164],
}


@pytest.fixture(scope="module")
def catalog() -> XidCatalog:
    problems = Problems()
    path = BUNDLED_RULES / "xid-catalog.yaml"
    doc = parse_yaml(path.read_text(), str(path), problems)
    assert doc is not None
    result = parse_xid_catalog(doc, problems)
    assert not problems, problems.errors
    return result


@pytest.mark.parametrize(("bucket", "code"), [(b, c) for b, codes in BUCKETS.items() for c in codes])
def test_listed_codes_map_to_their_bucket(catalog: XidCatalog, bucket: str, code: int) -> None:
    info = catalog.lookup(code)
    assert (info.code, info.resolution) == (code, bucket)
    assert info.description and info.cause


@pytest.mark.parametrize("bucket", list(BUCKETS))
def test_buckets_hold_exactly_the_listed_codes(catalog: XidCatalog, bucket: str) -> None:
    assert catalog.codes(bucket) == sorted(BUCKETS[bucket])


@pytest.mark.parametrize("code", [999, 0, 1, 500])
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
