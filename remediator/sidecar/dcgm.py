"""NVIDIA DCGM's diagnostic (`dcgmi diag -r <level> -i <gpu> -j`) as part of the validation gate.

`dcgmi` is found at the configured path (REMEDIATOR_DCGMI) or on PATH. It runs as an argument list,
bounded by a timeout (see bounded.py: process group SIGTERM, then SIGKILL), and its JSON is parsed into
one `DcgmTest` per test that applies to the GPU. Two JSON shapes exist:

- DCGM 4.x: `{"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"entity_group": "GPU", "entity_id": 0, "status", "warnings": [...], "info": [...]}], "test_summary":
  {"status"}}]}]}, "metadata": {"version"}, "entity_groups": [...]}`;
- DCGM 3.x: the root is `"DCGM GPU Diagnostic"` and results carry `"gpu_id"` (a string) instead.

Either may instead hold `runtime_error` (the diagnostic could not run). Statuses are DCGM's words: Pass,
Fail, Skip, Warn (shown as Fail unless asked for), Not Run. DCGM numbers GPUs like NVML does on a node
without MIG, so the NVML index is passed as the DCGM GPU id.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from remediator.domain.json_values import JsonObject
from remediator.sidecar.bounded import run_bounded
from remediator.sidecar.schemas import DcgmRun, DcgmTest, DcgmWarning, GateVerdict

__all__ = ["diag_argv", "find_dcgmi", "parse_diag", "run_diag"]

_ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
_VERDICTS: dict[str, GateVerdict] = {
    "pass": "pass",
    "skip": "not_applicable",
    "not run": "not_applicable",
    "fail": "fail",
    "warn": "fail",
}
# Worst first: the verdict of a test with several results for the GPU.
_ORDER: tuple[GateVerdict, ...] = ("error", "fail", "pass", "not_applicable")


def find_dcgmi(configured: Path | None) -> Path | None:
    """The configured dcgmi when it is an executable file, else `dcgmi` on PATH, else None."""
    if configured is not None:
        return configured if configured.is_file() and os.access(configured, os.X_OK) else None
    found = shutil.which("dcgmi")
    return Path(found) if found else None


def diag_argv(dcgmi: Path, level: int, gpu_index: int) -> list[str]:
    return [str(dcgmi), "diag", "-r", str(level), "-i", str(gpu_index), "-j"]


def _json_document(text: str) -> JsonObject | None:
    """The JSON object in dcgmi's output (from the first `{` to the last `}`), or None."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        document = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def _for_gpu(result: Mapping[str, object], gpu_index: int) -> bool | None:
    """Does a result entry concern this GPU? None when it names no entity (a test-wide result)."""
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU"))
        return group.upper() == "GPU" and str(result.get("entity_id")) == str(gpu_index)
    if "gpu_id" in result:
        return str(result.get("gpu_id")) == str(gpu_index)
    if "gpu_ids" in result:
        return str(gpu_index) in [p.strip() for p in str(result.get("gpu_ids")).split(",")]
    return None


def _verdict(status: str) -> GateVerdict:
    return _VERDICTS.get(status.strip().lower(), "error")


def _warnings(entry: Mapping[str, object]) -> list[DcgmWarning]:
    found = []
    for w in _items(entry.get("warnings")):
        if isinstance(w, Mapping):
            text = w.get("warning", w.get("warnings", ""))
            found.append(
                DcgmWarning(
                    warning=str(text),
                    error_id=_int(w.get("error_id")),
                    error_category=_int(w.get("error_category")),
                    error_severity=_int(w.get("error_severity")),
                )
            )
        elif w:
            found.append(DcgmWarning(warning=str(w)))
    return found


def _items(value: object) -> Iterable[object]:
    """What a JSON field holds to iterate over (nothing for null, a number or false)."""
    return value if isinstance(value, Iterable) else ()


def _int(value: object) -> int | None:
    if not isinstance(value, int | float | str | bytes):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _info(entry: Mapping[str, object]) -> list[str]:
    info = entry.get("info")
    if info is None:
        return []
    return [str(i) for i in info] if isinstance(info, list) else [str(info)]


def _test(category: str, test: Mapping[str, object], gpu_index: int) -> DcgmTest | None:
    results = [r for r in _items(test.get("results")) if isinstance(r, Mapping)]
    mine = [r for r in results if _for_gpu(r, gpu_index)]
    if not mine:
        mine = [r for r in results if _for_gpu(r, gpu_index) is None]
    if not mine:
        summary = test.get("test_summary")
        if not isinstance(summary, Mapping) or results:
            return None  # the test ran on other GPUs only (or not at all)
        mine = [summary]
    statuses = [str(r.get("status", "")) for r in mine]
    verdicts = [_verdict(s) for s in statuses]
    worst: GateVerdict = next((v for v in _ORDER if v in verdicts), "error")
    status = statuses[verdicts.index(worst)] if worst in verdicts else ""
    return DcgmTest(
        category=category,
        name=str(test.get("name", "?")),
        status=status,
        verdict=worst,
        warnings=[w for r in mine for w in _warnings(r)],
        info=[i for r in mine for i in _info(r)],
    )


def parse_diag(text: str, gpu_index: int) -> tuple[list[DcgmTest], str | None, str | None]:
    """(tests for the GPU, error, DCGM version) from `dcgmi diag -j` output."""
    document = _json_document(text)
    if document is None:
        return [], "dcgmi printed no JSON document", None
    roots = [r for r in (document.get(k) for k in _ROOTS) if isinstance(r, Mapping)]
    root = roots[0] if roots else None
    if root is None:
        return [], f"dcgmi JSON has none of {', '.join(_ROOTS)}", None
    metadata = document.get("metadata")
    version = root.get("version") or (metadata.get("version") if isinstance(metadata, Mapping) else None)
    version = str(version) if version else None
    if root.get("runtime_error"):
        return [], f"DCGM runtime error: {root['runtime_error']}", version
    tests: list[DcgmTest] = []
    for category in _items(root.get("test_categories")):
        if not isinstance(category, Mapping):
            continue
        for test in _items(category.get("tests")):
            if isinstance(test, Mapping):
                parsed = _test(str(category.get("category", "?")), test, gpu_index)
                if parsed is not None:
                    tests.append(parsed)
    if not tests:
        return [], f"dcgmi reported no test result for GPU {gpu_index}", version
    return tests, None, version


def _tail(data: bytes, limit: int = 500) -> str:
    return data.decode(errors="replace").strip()[-limit:]


async def run_diag(dcgmi: Path, level: int, gpu_index: int, timeout: float) -> DcgmRun:
    """Run the diagnostic for one GPU; every outcome, a hang included, comes back as a DcgmRun."""
    argv = diag_argv(dcgmi, level, gpu_index)
    run = DcgmRun(available=True, path=str(dcgmi), argv=argv, level=level, timeout_seconds=timeout)
    try:
        done = await run_bounded(argv, timeout=timeout)
    except OSError as exc:
        run.error = f"cannot start {dcgmi}: {exc}"
        return run
    run.exit_code, run.timed_out, run.duration_seconds = done.exit_code, done.timed_out, round(done.seconds, 3)
    if done.timed_out:
        run.error = f"dcgmi diag -r {level} did not finish within {timeout:g} s and was killed"
        return run
    tests, error, version = parse_diag(done.stdout.decode(errors="replace"), gpu_index)
    run.tests, run.version = tests, version
    if error is not None:
        output = _tail(done.stdout) or _tail(done.stderr)
        run.error = f"{error} (exit status {done.exit_code}){': ' + output if output else ''}"
    return run
