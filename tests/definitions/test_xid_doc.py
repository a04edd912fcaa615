"""docs/signals.md's Xid table is what `python -m remediator.tools.xid_doc` generates from the catalog and the rules."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from remediator.definitions import DefinitionSet
from remediator.domain.xid_decode import decoded_action
from remediator.tools.xid_doc import BEGIN, END, bundled_definitions, decoded_actions, render_table, replace_table

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "signals.md"


@pytest.fixture(scope="module")
def defs() -> DefinitionSet:
    return bundled_definitions()


def rows(table: str) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for line in table.splitlines():
        m = re.match(r"\| (\d+) \|", line)
        if m:
            assert int(m.group(1)) not in found, line
            found[int(m.group(1))] = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    return found


def test_the_doc_holds_the_generated_table(defs: DefinitionSet) -> None:
    doc = DOC.read_text()
    assert replace_table(doc, render_table(defs)) == doc, "run: python -m remediator.tools.xid_doc"


def test_one_row_per_code_with_its_action_detector_and_route(defs: DefinitionSet) -> None:
    table = rows(render_table(defs))
    assert sorted(table) == list(range(1, 173))
    for code, (_, mnemonic, action, seen, route) in table.items():
        info = defs.xid.lookup(code)
        assert mnemonic == (info.mnemonic or "-")
        if info.nvidia is not None:
            assert action == f"NVIDIA: `{info.nvidia}`"
        else:
            assert action.startswith(f"project: `{info.resolution}`"), code
            assert ("(NVIDIA: " in action) == bool(info.nvidia_note), code  # NVIDIA's note beside it, where it has one
        assert ("kernel-log reader only" in seen) == (code in (79, 119, 120)), code
        assert route
    assert table[79][4] == "`xid-reboot-node` -> `reboot-node`"
    assert table[108][4] == "none (starts nothing)"
    assert table[94][4].endswith("with `gpu_instance` (MIG): `xid-mig-contained` -> `drain-gpu-instance`")
    assert "`RESTART_FM` `xid-fabric-manager` -> `observe-node`" in table[45][4]
    assert "`DRAIN_P2P` `xid-drain-p2p` -> `quarantine-node`" in table[154][4]
    assert all(162 <= c <= 172 for c, row in table.items() if row[2].startswith("project:"))


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (45, "pid=1, name=x, Ch 00000008"),
        (45, "Ch 00000001 caused by previous Xid 149"),
        (74, "NVLink: fatal error detected on link 14(0x100, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"),
        (145, "RLW_REMAP Nonfatal XC0 i0 Link 13 (0x00000106 0x00000040 0x00000000)"),
        (149, "NETIR_BER_EVENT Nonfatal XC0 i0 Link 1 (0x00000226 0x00000002)"),
        (154, "GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)"),
    ],
)
def test_the_listed_decoded_actions_cover_what_the_decode_gives(code: int, message: str) -> None:
    assert decoded_action(code, message) in decoded_actions(code)


def test_check_reports_drift_and_the_tool_rewrites_only_the_table(tmp_path: Path) -> None:
    doc = tmp_path / "signals.md"
    original = DOC.read_text()
    doc.write_text(original.replace("| 79 |", "| 79 | stale |", 1))
    tool = [sys.executable, "-m", "remediator.tools.xid_doc", "--doc", str(doc)]
    check = subprocess.run([*tool, "--check"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert check.returncode == 1 and "out of date" in check.stderr
    assert subprocess.run(tool, capture_output=True, text=True, timeout=120, cwd=ROOT).returncode == 0
    assert doc.read_text() == original
    doc.write_text(original.replace(END, ""))
    broken = subprocess.run([*tool, "--check"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert broken.returncode == 2 and BEGIN in broken.stderr
