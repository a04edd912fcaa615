"""docs/signals.md's Xid table, generated from the catalog and the shipped rules so the doc cannot drift from them.

    python -m remediator.tools.xid_doc                 # rewrite the table in docs/signals.md
    python -m remediator.tools.xid_doc --check         # exit 1 when docs/signals.md differs
    python -m remediator.tools.xid_doc --doc PATH      # another copy of the doc

One row per code 1-172: the code, NVIDIA's mnemonic, the immediate action (NVIDIA's published bucket, or
`project: X` with NVIDIA's note where NVIDIA publishes none), which detector sees it, and the rule and playbook
an Xid alert of that code routes to (through the same matching the controller runs: `engine/planning.py`
`match_labels`, `matching.match_rules`). The table sits between two HTML comment markers; the rest of the doc is
left as it is.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from remediator.actions.registry import default_registry
from remediator.definitions import DefinitionSet, load_definitions
from remediator.definitions.loader import BUNDLED_PLAYBOOKS, BUNDLED_RULES
from remediator.definitions.matching import match_rules
from remediator.domain.xid_decode import DECODED_CODES, NVLINK5_DECODE
from remediator.engine.planning import match_labels
from remediator.intake.normalize import GpuAlert

__all__ = ["BEGIN", "END", "FIRST", "LAST", "decoded_actions", "main", "render_table", "replace_table"]

BEGIN = "<!-- xid-table:begin (generated: python -m remediator.tools.xid_doc) -->"
END = "<!-- xid-table:end -->"
FIRST, LAST = 1, 172
# Xids DCGM (and so dcgm-exporter) cannot report, as DCGM's maintainers state (NVML limits): the GPU is gone or
# its GSP is down. The node sidecar's kernel-log reader sees them: the driver prints every Xid to the kernel log.
KERNEL_LOG_ONLY = frozenset({79, 119, 120})
_ALL = "node sidecar (kernel log, NVML events), dcgm-exporter"
_KERNEL = "node sidecar's kernel-log reader only (NVML and DCGM cannot report it)"


def decoded_actions(code: int) -> tuple[str, ...]:
    """Every action NVIDIA's decode of `code`'s message can give (remediator/domain/xid_decode.py), sorted."""
    if code == 45:
        found = {"IGNORE", "RESTART_FM"}
    elif code == 74:
        found = {"CHECK_MECHANICALS", "CONTACT_SUPPORT", "IGNORE"}
    elif code == 154:
        found = {"RESET_GPU", "RESTART_BM", "DRAIN_P2P", "DRAIN_AND_RESET", "IGNORE"}
    elif code in DECODED_CODES:  # 144-150: the sheet's rows, and its fallbacks (Fatal: reset; else report)
        rows = [row for row in NVLINK5_DECODE if row.xid == code]
        found = {row.action for row in rows} | {row.action2 for row in rows if row.action2} | {
            "RESET_GPU", "CONTACT_SUPPORT"}
    else:
        found = set()
    return tuple(sorted(found))


def _route(defs: DefinitionSet, code: int, action: str | None = None, **extra: str) -> str:
    labels = {"alertname": "GPUXidError", "xid": str(code), **({"xid_action": action} if action else {}), **extra}
    alert = GpuAlert(alertname="GPUXidError", status="firing", fingerprint="xid-doc", kind="xid", node="node",
                     node_source="Hostname", xid=code, labels=labels)
    matches = match_rules(match_labels(alert, defs), defs.rules)
    if not matches:
        return "none (starts nothing)"
    return f"`{matches[0].rule.name}` -> `{matches[0].rule.playbook}`"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def render_table(defs: DefinitionSet) -> str:
    """The table's Markdown (header, one row per code 1-172), without the markers."""
    lines = [
        "| Xid | mnemonic | immediate action | seen by | routes to (rule -> playbook) |",
        "|---|---|---|---|---|",
    ]
    for code in range(FIRST, LAST + 1):
        info = defs.xid.lookup(code)
        if info.nvidia is not None:
            action = f"NVIDIA: `{info.nvidia}`"
        else:
            note = f" (NVIDIA: {_cell(info.nvidia_note)})" if info.nvidia_note else ""
            action = f"project: `{info.resolution}`{note}"
        route = _route(defs, code)
        if code in DECODED_CODES:
            decoded = ", ".join(f"`{a}` {_route(defs, code, a)}" for a in decoded_actions(code))
            route = f"message not decoded: {route}; decoded (`xid_action`): {decoded}"
        mig = _route(defs, code, gpu_instance="1")
        if mig != _route(defs, code):
            route += f"; with `gpu_instance` (MIG): {mig}"
        seen = _KERNEL if code in KERNEL_LOG_ONLY else _ALL
        lines.append(f"| {code} | {_cell(info.mnemonic) or '-'} | {action} | {seen} | {route} |")
    return "\n".join(lines) + "\n"


def replace_table(doc: str, table: str) -> str:
    """`doc` with the text between the markers replaced by `table`; a ValueError when the markers are missing,
    repeated or out of order."""
    if doc.count(BEGIN) != 1 or doc.count(END) != 1 or doc.index(BEGIN) > doc.index(END):
        raise ValueError(f"the doc needs exactly one {BEGIN!r} followed by one {END!r}")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def bundled_definitions() -> DefinitionSet:
    known = {name: action.Params for name, action in default_registry().items()}
    return load_definitions(BUNDLED_RULES, BUNDLED_PLAYBOOKS, known)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m remediator.tools.xid_doc", description=__doc__.splitlines()[0])
    parser.add_argument("--doc", type=Path, default=Path("docs/signals.md"), help="the doc holding the markers")
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    try:
        current = args.doc.read_text()
        wanted = replace_table(current, render_table(bundled_definitions()))
    except (OSError, ValueError) as exc:
        print(f"{args.doc}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if current != wanted:
            print(f"{args.doc}: the Xid table is out of date; run python -m remediator.tools.xid_doc", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        args.doc.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
