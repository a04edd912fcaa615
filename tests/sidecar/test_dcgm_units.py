"""DCGM diag JSON parsing (4.x and 3.x shapes) and the bounded child-process runner, in-process."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from remediator.sidecar.bounded import run_bounded
from remediator.sidecar.dcgm import diag_argv, parse_diag

SAMPLES = Path(__file__).resolve().parent / "dcgm"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_a_passing_level_2_run_gives_one_result_per_test() -> None:
    tests, error, version = parse_diag(sample("pass-r2-v4.json"), 0)
    assert error is None and version == "4.2.3"
    assert [(t.category, t.name, t.status, t.verdict) for t in tests] == [
        ("Deployment", "software", "Pass", "pass"),
        ("Integration", "pcie", "Pass", "pass"),
        ("Hardware", "memory", "Pass", "pass"),
    ]
    assert tests[1].info[0].startswith("GPU to Host bandwidth")


def test_a_failed_test_carries_dcgm_s_error() -> None:
    tests, error, _ = parse_diag(sample("fail-r2-v4.json"), 0)
    assert error is None
    memory = next(t for t in tests if t.name == "memory")
    assert (memory.status, memory.verdict) == ("Fail", "fail")
    assert [(w.error_id, w.error_severity) for w in memory.warnings] == [(85, 2)]
    assert "row remappings are pending" in memory.warnings[0].warning


def test_results_of_other_gpus_are_left_out() -> None:
    tests, _, _ = parse_diag(sample("pass-r2-v4.json"), 1)
    assert tests == []
    _, error, _ = parse_diag(sample("pass-r2-v4.json"), 1)
    assert error == "dcgmi reported no test result for GPU 1"


def test_dcgm_3_shape_with_gpu_ids_and_its_warning_key() -> None:
    tests, error, version = parse_diag(sample("mixed-r1-v3.json"), 0)
    assert error is None and version == "3.3.9"
    by_name = {t.name: t for t in tests}
    assert by_name["Denylist"].verdict == "pass"
    assert by_name["Environmental Variables"].verdict == "not_applicable"
    assert by_name["Persistence Mode"].verdict == "fail"
    assert by_name["Persistence Mode"].warnings[0].warning == "Persistence mode for GPU 0 is currently disabled."
    assert by_name["PCIe"].verdict == "pass"  # GPU 1's failure is not GPU 0's
    assert parse_diag(sample("mixed-r1-v3.json"), 1)[0][-1].verdict == "fail"


def test_a_runtime_error_and_garbage_are_errors() -> None:
    tests, error, version = parse_diag(sample("runtime-error-v4.json"), 0)
    assert tests == [] and version == "4.2.3"
    assert error is not None and error.startswith("DCGM runtime error: Error: Unable to complete diagnostic")
    assert parse_diag("Error: unable to connect to host engine\n", 0)[1] == "dcgmi printed no JSON document"
    assert parse_diag('{"something": {}}', 0)[1] == "dcgmi JSON has none of DCGM Diagnostic, DCGM GPU Diagnostic"


def test_unknown_status_is_an_error_not_a_pass() -> None:
    doc = '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "results": ' \
          '[{"entity_group": "GPU", "entity_id": 0, "status": "Exploded"}]}]}]}}'
    [test] = parse_diag(doc, 0)[0]
    assert test.verdict == "error"


def test_the_argument_list() -> None:
    assert diag_argv(Path("/usr/bin/dcgmi"), 2, 3) == ["/usr/bin/dcgmi", "diag", "-r", "2", "-i", "3", "-j"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie left for its (dead) parent's reaper counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


async def _wait_gone(pid: int) -> bool:
    for _ in range(100):
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_hung_child_and_its_children_are_killed_at_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pid_file}; echo started; wait"
    done = await run_bounded(["/bin/sh", "-c", script], timeout=0.5, grace=0.5)
    assert done.timed_out and done.exit_code is None
    assert done.stdout == b"started\n"
    assert await _wait_gone(int(pid_file.read_text()))


async def test_a_child_that_ignores_sigterm_gets_sigkill_after_the_grace(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = f"trap '' TERM; sleep 300 & echo $! > {pid_file}; wait; wait"
    done = await run_bounded(["/bin/sh", "-c", script], timeout=0.3, grace=0.3)
    assert done.timed_out
    assert await _wait_gone(int(pid_file.read_text()))


async def test_output_is_cut_at_the_limit_and_the_exit_status_kept() -> None:
    done = await run_bounded(["/bin/sh", "-c", "head -c 100000 /dev/zero; exit 3"], timeout=10, max_output=1000)
    assert (done.exit_code, done.timed_out, done.stdout_truncated, len(done.stdout)) == (3, False, True, 1000)


async def test_stop_ends_the_run_with_its_reason(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    started = time.monotonic()

    def stop() -> str | None:
        return "enough" if flag.exists() or time.monotonic() - started > 0.3 else None

    done = await run_bounded(["/bin/sleep", "300"], timeout=60, stop=stop, poll_seconds=0.05, grace=0.5)
    assert (done.stopped, done.timed_out, done.exit_code) == ("enough", False, None)
