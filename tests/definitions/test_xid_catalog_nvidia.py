"""The catalog's `nvidia` column is NVIDIA's published immediate action for every code 1-172, exactly; the
project's own buckets are marked as such with NVIDIA's note; the message decodes follow NVIDIA's sheets."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from remediator.definitions.datafiles import parse_xid_catalog
from remediator.definitions.loader import BUNDLED_RULES
from remediator.definitions.source import Problems, parse_yaml
from remediator.definitions.xid import XidCatalog
from remediator.domain.xid_decode import (
    ANY_STATUS,
    NVLINK5_DECODE,
    decode_nvlink5,
    decode_xid45,
    decode_xid74,
    decode_xid154,
    decoded_action,
)

NVIDIA_TSV = Path(__file__).parent / "data" / "nvidia-xid-catalog.tsv"
NVIDIA = {
    int(row["code"]): row
    for row in csv.DictReader((line for line in NVIDIA_TSV.open() if not line.startswith("#")), delimiter="\t")
}


def _parse(text: str) -> tuple[XidCatalog, Problems]:
    problems = Problems()
    doc = parse_yaml(text, "rules/xid-catalog.yaml", problems)
    assert doc is not None
    return parse_xid_catalog(doc, problems), problems


@pytest.fixture(scope="module")
def catalog() -> XidCatalog:
    result, problems = _parse((BUNDLED_RULES / "xid-catalog.yaml").read_text())
    assert not problems, problems.errors
    return result


def test_the_reference_holds_every_code_once() -> None:
    assert sorted(NVIDIA) == list(range(1, 173))


@pytest.mark.parametrize("code", range(1, 173))
def test_every_code_has_nvidias_action_or_says_it_is_the_projects(catalog: XidCatalog, code: int) -> None:
    published = NVIDIA[code]
    info = catalog.entries[code]
    assert info.mnemonic == published["mnemonic"]
    if published["immediate"]:
        assert (info.nvidia, info.resolution, info.chosen_by) == (published["immediate"],) * 2 + ("nvidia",)
        assert info.nvidia_note == ""
    else:
        # NVIDIA leaves the column open: the bucket is the project's, and NVIDIA's words stand beside it.
        assert (info.nvidia, info.chosen_by) == (None, "project")
        assert info.nvidia_note == published["note"]
    assert info.description and info.cause


def test_nvidia_leaves_only_162_to_172_open() -> None:
    assert [code for code, row in NVIDIA.items() if not row["immediate"]] == list(range(162, 173))


def test_named_facts(catalog: XidCatalog) -> None:
    assert catalog.lookup(108).resolution == "IGNORE"
    assert "reset the GPU" in catalog.lookup(163).nvidia_note
    assert "ECC should be enabled" in catalog.lookup(168).nvidia_note
    assert catalog.lookup(168).resolution == "RESTART_BM"


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("{nvidia: RESET_GPU, project: IGNORE, cause: c, description: d}", "exactly one of nvidia"),
        ("{cause: c, description: d}", "exactly one of nvidia"),
        ("{project: REBOOT, cause: c, description: d}", "unknown resolution bucket 'REBOOT'"),
        ("{nvidia: IGNORE, nvidia_note: 3, cause: c, description: d}", "nvidia_note must be a string"),
    ],
)
def test_bad_entries_are_refused(entry: str, error: str) -> None:
    result, problems = _parse(f"xids:\n  79: {entry}\n")
    assert 79 not in result.entries
    assert any(error in str(e) for e in problems.errors), problems.errors


def test_the_older_resolution_key_is_a_project_choice() -> None:
    result, problems = _parse("xids:\n  79: {resolution: RESTART_BM, cause: c, description: d}\n")
    assert not problems
    assert (result.lookup(79).resolution, result.lookup(79).chosen_by) == ("RESTART_BM", "project")


# -- NVIDIA's "XID 144-150 Decode" sheet ---------------------------------------------------------------


def _message(row_index: int, v1: bool) -> tuple[int, str, str]:
    row = NVLINK5_DECODE[row_index]
    intr = row.v1 if v1 else row.v2
    if row.field is not None:
        intr |= row.field << (14 if v1 else 12)
    status = 0 if row.status == ANY_STATUS else row.status
    name = row.names[0] if v1 else row.names[-1]
    return row.xid, f"{name} Nonfatal XC0 i0 Link 03 (0x{intr:08x} 0x{status:08x} 0x0 0x0 0x0 0x0)", row.action


@pytest.mark.parametrize("v1", [True, False], ids=["before-R575", "R575-on"])
@pytest.mark.parametrize("index", range(len(NVLINK5_DECODE)))
def test_every_row_of_the_decode_sheet(index: int, v1: bool) -> None:
    code, message, action = _message(index, v1)
    assert decode_nvlink5(code, message) == action


@pytest.mark.parametrize(
    ("code", "message", "action"),
    [
        # RLW_RXPIPE 0x1 is IGNORE unless intrInfo carries the promotion bit (V1 bit 10, V2 bit 7): RESET_GPU.
        (145, "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x000000c2 0x00000001 0x0 0x0 0x0 0x0)", "IGNORE"),
        (145, "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x000004c2 0x00000001 0x0 0x0 0x0 0x0)", "RESET_GPU"),
        (145, "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x00000086 0x00000001 0x0 0x0 0x0 0x0)", "RESET_GPU"),
        # NETIR_LINK_EVT field 100110 (peer down to sleep) and 101000 are IGNORE, the rest RESET_GPU.
        (149, "NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x000981c6 0x0 0x0 0x0 0x0 0x0)", "IGNORE"),
        (149, "NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x000a01c6 0x0 0x0 0x0 0x0 0x0)", "IGNORE"),
        (149, "NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x000401c6 0x0 0x0 0x0 0x0 0x0)", "RESET_GPU"),
        # The corpus' lines (tests/data/kernel-log-lines.jsonl): the decode the corpus names.
        (149, "NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001 0x0 0x0 0x0 0x0)", "IGNORE"),
        (145, "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x1 0x0 0x100000 0x4)", "IGNORE"),
        (145, "RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x040988e2 0x00000008 0x0 0x0 0x0 0x0)", "XID_154_EVAL"),
        (149, "NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x0 0x0 0x0 0x0)", "RESET_GPU"),
        (149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x0 0x0 0x0 0x0)", "RESET_GPU"),
        # Outside the sheet: Fatal -> RESET_GPU (every Fatal row's action), else CONTACT_SUPPORT.
        (144, "SAW_MVB Fatal XC0 i0 Link 02 (0x00000021 0x00000040 0x0 0x0 0x0 0x0)", "RESET_GPU"),
        (144, "SAW_MVB Nonfatal XC0 i0 Link 02 (0x00000021 0x00000040 0x0 0x0 0x0 0x0)", "CONTACT_SUPPORT"),
        # A name the driver spells differently is found by its intrInfo bits.
        (146, "TLW_SOMETHING Nonfatal XC0 i0 Link 02 (0x00000009 0x00000004 0x0 0x0 0x0 0x0)", "RESET_GPU"),
        (147, "no fields here", None),
        (150, "", None),
    ],
)
def test_nvlink5_messages(code: int, message: str, action: str | None) -> None:
    assert decode_nvlink5(code, message) == action


# -- Xid 74: NVIDIA's WORKFLOW_NVLINK_ERR register bits (Hopper) --------------------------------------


@pytest.mark.parametrize(
    ("registers", "action"),
    [
        ((0x1, 0, 0, 0, 0, 0, 0), "IGNORE"),  # first register bit 0: can be safely ignored
        ((0x40800001, 0, 0, 0, 0x100000, 0, 0), "IGNORE"),  # bits 0/23/30; fifth bit 20: threshold, continue
        ((0x100, 0, 0, 0, 0, 0, 0), "CHECK_MECHANICALS"),  # bit 8: check the link's mechanical connections
        ((0x200000, 0, 0, 0, 0, 0, 0), "CHECK_MECHANICALS"),  # bit 21: marginal SI, check connections
        ((0x10, 0, 0, 0, 0, 0, 0), "CONTACT_SUPPORT"),  # bit 4: ECC/parity, report when it repeats
        ((0, 0, 0x10000, 0, 0, 0, 0), "CONTACT_SUPPORT"),  # third bit 16: field diags and a report
        ((0x2, 0, 0, 0, 0, 0, 0), "CONTACT_SUPPORT"),  # sympathetic bit alone: report a bug
        ((0x102, 0, 0, 0, 0, 0, 0), "CHECK_MECHANICALS"),  # a sympathetic bit follows the others
        ((0, 0, 0, 0x10000, 0, 0, 0), "CONTACT_SUPPORT"),  # fourth bit 16 alone
        ((0x8, 0, 0, 0, 0, 0, 0), "CONTACT_SUPPORT"),  # bit 3 is not in NVIDIA's list: report a bug
        ((0, 0x1, 0, 0, 0, 0, 0), "CONTACT_SUPPORT"),  # second register is not valid on Hopper
        ((0, 0, 0, 0, 0, 0, 0), "CONTACT_SUPPORT"),  # nothing to decode
    ],
)
def test_xid74_registers(registers: tuple[int, ...], action: str) -> None:
    fields = ", ".join(f"0x{value:x}" for value in registers)
    assert decode_xid74(f"NVLink: fatal error detected on link 14({fields})") == action


def test_xid74_without_registers_is_not_decoded() -> None:
    assert decode_xid74("NVLink: fatal error detected on link 14") is None
    assert decoded_action(74, "") is None


def test_xid45_solo_or_following_another() -> None:
    assert decode_xid45("Ch 00000001 caused by previous Xid 149") == "IGNORE"
    assert decode_xid45("pid=1818990, name=python3, Ch 00000001") == "RESTART_FM"
    assert decode_xid45("") is None


@pytest.mark.parametrize(
    ("message", "action"),
    [
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "RESET_GPU"),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "RESTART_BM"),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", "DRAIN_P2P"),
        ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "DRAIN_AND_RESET"),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "IGNORE"),
        ("something else", None),
    ],
)
def test_xid154_recovery_action(message: str, action: str | None) -> None:
    assert decode_xid154(message) == action


@pytest.mark.parametrize("code", [c for c in range(1, 173) if c not in (45, 74, 154, *range(144, 151))])
def test_other_codes_are_not_decoded(code: int) -> None:
    assert decoded_action(code, "Fatal XC0 i0 Link 1 (0x1 0x2) caused by previous Xid 1 to 0x1 (GPU Reset)") is None


# dcgm-exporter's err_msg for the decoded codes: its description of the code, not the driver's line
# (github.com/NVIDIA/dcgm-exporter internal/pkg/collector/xid_errors.go, xidErrCodeToText, commit d5e5f51).
DCGM_EXPORTER_ERR_MSG = {
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    74: "NVLINK Error",
    144: "NVLINK: Saw Error",
    145: "NVLINK: RLW Error",
    146: "NVLINK: TLW Error",
    147: "NVLINK: TREX Error",
    148: "NVLINK: NVLPW_CTRL Error",
    149: "NVLINK: NETIR Error",
    150: "NVLINK: MSE Error",
    154: "GPU Recovery Action Changed",
}


@pytest.mark.parametrize(("code", "err_msg"), sorted(DCGM_EXPORTER_ERR_MSG.items()))
def test_dcgm_exporter_descriptions_are_not_decoded(code: int, err_msg: str) -> None:
    """A description of the code carries none of the fields the decode reads: the catalog's bucket stands
    (Xid 45's description says "previous errors" but not which Xid, nor that it came alone)."""
    assert decoded_action(code, err_msg) is None


def test_the_decode_imports_only_the_standard_library() -> None:
    """The node agent imports remediator.domain.xid_decode; it must not pull in the definitions' loader."""
    import subprocess
    import sys

    code = (
        "import sys, remediator.domain.xid_decode\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', 'jinja2', 'celpy', 'pydantic')"
        " or m.startswith('remediator.definitions'))\n"
        "print(','.join(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
