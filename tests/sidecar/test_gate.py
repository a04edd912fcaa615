"""The validation gate and the bug report through a real sidecar process on the fake NVML.

A fake `dcgmi` on the sidecar's PATH prints DCGM's JSON (tests/sidecar/dcgm) and records its arguments;
a fake `nvidia-bug-report.sh` at the configured path writes a report where it is told to.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.actions.base import ActionContext, Target
from remediator.actions.gpu import CollectDiagnostics
from remediator.actions.validation import ValidateGpu
from remediator.adapters.sidecar import SidecarClient
from remediator.errors import ActionError, GateUnknown, Invalid, StepFailed
from remediator.settings import Settings
from remediator.sidecar.schemas import DiagnosticsReport, ValidationReport
from tests.sidecar.conftest import AUTH, TOKEN, SidecarEnv, free_port, running_env
from tests.sidecar.fakenvml import gpu_uuid

SAMPLES = Path(__file__).resolve().parent / "dcgm"
NVML_CHECKS = [
    "present", "remapped_rows.failure", "remapped_rows.pending", "retired_pages.pending",
    "ecc.volatile_uncorrected", "ecc.aggregate_uncorrected", "pcie.width", "pcie.generation",
    "clock_events", "recovery_action", "temperature",
]
MAX_BYTES = 50_000


class Tools:
    """The fake node tools in the sidecar's bin directory (on its PATH)."""

    def __init__(self, base: Path) -> None:
        self.bin = base / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.args = base / "dcgmi-args.txt"
        self.reports = base / "diagnostics"

    def reset(self) -> None:
        for path in (self.bin / "dcgmi", self.bin / "nvidia-bug-report.sh", self.args):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.reports, ignore_errors=True)

    def script(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)

    def dcgmi(self, sample: str, exit_code: int = 0) -> None:
        self.script("dcgmi", f'echo "$@" > {self.args}\ncat {SAMPLES / sample}\nexit {exit_code}\n')


@pytest.fixture(scope="module")
def gate_env(tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: Path) -> Iterator[tuple[SidecarEnv, Tools]]:
    base = tmp_path_factory.mktemp("gate")
    tools = Tools(base)
    extra = {
        "PATH": f"{tools.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "REMEDIATOR_NVIDIA_BUG_REPORT": str(tools.bin / "nvidia-bug-report.sh"),
        "REMEDIATOR_DIAGNOSTICS_DIR": str(tools.reports),
        "REMEDIATOR_DIAGNOSTICS_MAX_BYTES": str(MAX_BYTES),
    }
    with running_env(base, fake_nvml_dir, extra) as env:
        yield env, tools


@pytest.fixture
def env(gate_env: tuple[SidecarEnv, Tools]) -> SidecarEnv:
    gate_env[0].reset()
    gate_env[1].reset()
    return gate_env[0]


@pytest.fixture
def tools(gate_env: tuple[SidecarEnv, Tools], env: SidecarEnv) -> Tools:
    return gate_env[1]


@pytest.fixture
def http(env: SidecarEnv) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=env.url, headers=AUTH, timeout=60.0) as client:
        yield client


def validate(http: httpx.Client, gpu: str, **body: Any) -> ValidationReport:
    response = http.post(f"/v1/gpus/{gpu}/validate", json=body or None)
    assert response.status_code == 200, response.text
    return ValidationReport.model_validate(response.json())


def checks(report: ValidationReport) -> dict[str, Any]:
    return {c.name: c for c in report.checks}


# ------------------------------------------------------------------------------------------ NVML checks


def test_a_healthy_h200_passes_every_nvml_check(http: httpx.Client) -> None:
    report = validate(http, gpu_uuid(0))
    assert (report.verdict, report.failed, report.uuid, report.index) == ("pass", [], gpu_uuid(0), 0)
    by_name = checks(report)
    assert [c.name for c in report.checks] == [*NVML_CHECKS, "driver_init", "dcgm"]
    verdicts = {name: c.verdict for name, c in by_name.items()}
    assert verdicts == {
        "present": "pass", "remapped_rows.failure": "pass", "remapped_rows.pending": "pass",
        "retired_pages.pending": "not_applicable",  # Hopper remaps rows instead
        "ecc.volatile_uncorrected": "pass", "ecc.aggregate_uncorrected": "not_applicable",  # no baseline
        "pcie.width": "pass", "pcie.generation": "pass", "clock_events": "pass", "recovery_action": "pass",
        "temperature": "pass", "driver_init": "pass", "dcgm": "not_applicable",
    }
    assert by_name["clock_events"].value == {"mask": 1, "reasons": ["gpu_idle"]}
    assert (by_name["temperature"].value, by_name["temperature"].threshold) == (34, 79)
    assert (by_name["pcie.width"].value, by_name["pcie.width"].expected) == (16, 16)
    assert "dcgmi not found on PATH" in by_name["dcgm"].detail
    assert report.dcgm.available is False


def test_a_pending_row_remap_fails_the_gate(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.1.remap.pending", 1)
    env.nvml.set("gpu.1.remap.uncorrectable", 2)
    report = validate(http, gpu_uuid(1))
    assert (report.verdict, report.failed) == ("fail", ["remapped_rows.pending"])
    pending = checks(report)["remapped_rows.pending"]
    assert pending.value is True and pending.expected is False
    assert "applied only by the next GPU reset" in pending.detail
    assert "2 for uncorrectable errors" in pending.detail


@pytest.mark.parametrize(
    ("state", "body", "failed", "words"),
    [
        ({"gpu.0.remap.failure": 1}, {}, ["remapped_rows.failure"], "replace the GPU"),
        ({"gpu.0.ecc.volatile.uncorrected": 2}, {}, ["ecc.volatile_uncorrected"], "2 uncorrectable"),
        ({"gpu.0.ecc.aggregate.uncorrected": 5}, {"aggregate_uncorrectable_baseline": 3},
         ["ecc.aggregate_uncorrected"], "2 new uncorrectable"),
        ({"gpu.0.pcie.width": 8}, {}, ["pcie.width"], "x8 of x16"),
        ({"gpu.0.pcie.gen": 3, "gpu.0.clock_events": 0}, {}, ["pcie.generation"], "while the GPU is not idle"),
        ({"gpu.0.clock_events": 0x1 | 0x8}, {}, ["clock_events"], "hw_slowdown"),
        ({"gpu.0.clock_events": 0x20}, {}, ["clock_events"], "sw_thermal_slowdown"),
        ({"gpu.0.clock_events": 0x80}, {}, ["clock_events"], "hw_power_brake_slowdown"),
        ({"gpu.0.recovery_action": 4}, {}, ["recovery_action"], "drain and reset"),
        ({"gpu.0.recovery_action": 2}, {}, ["recovery_action"], "node reboot"),
        ({"gpu.0.temp": 80}, {}, ["temperature"], "slowdown at 89 C"),
        ({"gpu.0.temp": 70}, {"temperature_margin_c": 20}, ["temperature"], "margin 20 C"),
        ({"err.nvmlDeviceGetFieldValues": 999}, {}, ["recovery_action"], "cannot read"),
        ({"err.nvmlDeviceGetRetiredPagesPendingStatus.0": 0, "gpu.0.retired_pending": 1}, {},
         ["retired_pages.pending"], "waiting to be retired"),
    ],
)
def test_each_fault_fails_its_check(
    env: SidecarEnv, http: httpx.Client, state: dict[str, int], body: dict[str, Any], failed: list[str], words: str
) -> None:
    for key, value in state.items():
        env.nvml.set(key, value)
    report = validate(http, gpu_uuid(0), **body)
    assert (report.verdict, report.failed) == ("fail", failed)
    assert words in checks(report)[failed[0]].detail


def test_what_passes_with_a_note(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.0.pcie.gen", 1)  # idle downshift
    env.nvml.set("gpu.0.clock_events", 0x1 | 0x4)  # idle, SW power cap
    env.nvml.set("gpu.0.pcie.gen_max", 4)  # a gen-5 GPU in a gen-4 slot
    env.nvml.set("gpu.0.ecc.aggregate.uncorrected", 3)
    report = validate(http, gpu_uuid(0), aggregate_uncorrectable_baseline=3)
    assert report.verdict == "pass", report.failed
    generation = checks(report)["pcie.generation"]
    assert generation.warning is not None and "idles" in generation.warning
    assert "the GPU supports gen 5; the slot allows 4" in generation.detail
    assert checks(report)["clock_events"].value["reasons"] == ["gpu_idle", "sw_power_cap"]
    assert checks(report)["ecc.aggregate_uncorrected"].verdict == "pass"


def test_a_driver_without_the_recovery_field_is_not_applicable(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("err.nvmlDeviceGetFieldValues", 3)
    report = validate(http, gpu_uuid(0))
    assert report.verdict == "pass"
    assert checks(report)["recovery_action"].verdict == "not_applicable"


def test_a_gpu_gone_from_the_device_list_fails_present(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.1.removed", 1)
    report = validate(http, gpu_uuid(1))
    assert (report.verdict, report.failed, report.index) == ("fail", ["present"], None)
    assert "not in NVML's device list" in checks(report)["present"].detail


def test_a_gpu_by_index_and_bad_ids(env: SidecarEnv, http: httpx.Client) -> None:
    report = validate(http, "1")
    assert (report.uuid, report.index, report.gpu) == (gpu_uuid(1), 1, "1")
    missing = http.post("/v1/gpus/7/validate")
    assert missing.status_code == 404 and "no GPU with index 7" in missing.json()["error"]
    assert http.post("/v1/gpus/nvidia0/validate").status_code == 422
    assert http.post(f"/v1/gpus/{gpu_uuid(0)}/validate", json={"dcgm_level": 9}).status_code == 422
    assert http.post(f"/v1/gpus/{gpu_uuid(0)}/validate", json={"level": 1}).status_code == 422
    assert httpx.post(f"{env.url}/v1/gpus/{gpu_uuid(0)}/validate").status_code == 401


# ------------------------------------------------------------------------------------------ DCGM


def test_dcgm_required_but_absent_fails_the_gate(http: httpx.Client) -> None:
    report = validate(http, gpu_uuid(0), require_dcgm=True)
    assert (report.verdict, report.failed) == ("fail", ["dcgm"])
    assert "required by the request" in checks(report)["dcgm"].detail


def test_a_passing_dcgm_diagnostic_on_path(tools: Tools, http: httpx.Client) -> None:
    tools.dcgmi("pass-r2-v4.json")
    report = validate(http, gpu_uuid(0), dcgm_level=2, require_dcgm=True)
    assert report.verdict == "pass", report.failed
    assert tools.args.read_text().split() == ["diag", "-r", "2", "-i", "0", "-j"]
    assert report.dcgm.available and report.dcgm.path == str(tools.bin / "dcgmi")
    assert report.dcgm.argv[1:] == ["diag", "-r", "2", "-i", "0", "-j"]
    assert (report.dcgm.exit_code, report.dcgm.version, report.dcgm.error) == (0, "4.2.3", None)
    assert [(t.name, t.status) for t in report.dcgm.tests] == [
        ("software", "Pass"), ("pcie", "Pass"), ("memory", "Pass"),
    ]
    assert {n: c.verdict for n, c in checks(report).items() if n.startswith("dcgm")} == {
        "dcgm": "pass", "dcgm.software": "pass", "dcgm.pcie": "pass", "dcgm.memory": "pass",
    }


def test_a_failing_dcgm_diagnostic_fails_the_gate_naming_the_test(tools: Tools, http: httpx.Client) -> None:
    tools.dcgmi("fail-r2-v4.json", exit_code=226)
    report = validate(http, gpu_uuid(0), dcgm_level=2)
    assert (report.verdict, report.failed) == ("fail", ["dcgm.memory"])
    memory = checks(report)["dcgm.memory"]
    assert memory.value == "Fail" and "row remappings are pending" in memory.detail
    assert report.dcgm.exit_code == 226
    assert report.dcgm.tests[1].warnings[0].error_id == 85


def test_a_dcgm_runtime_error_fails_the_gate(tools: Tools, http: httpx.Client) -> None:
    tools.dcgmi("runtime-error-v4.json", exit_code=1)
    report = validate(http, "0")
    assert report.failed == ["dcgm"]
    assert checks(report)["dcgm"].verdict == "error"
    assert "Host engine connection invalid" in checks(report)["dcgm"].detail


def test_a_hung_dcgmi_is_killed_at_the_timeout_and_the_gate_fails(tools: Tools, http: httpx.Client) -> None:
    child = tools.bin.parent / "hung-child.pid"
    tools.script("dcgmi", f"sleep 300 &\necho $! > {child}\nwait\n")
    started = time.monotonic()
    report = validate(http, gpu_uuid(0), dcgm_level=2, dcgm_timeout_seconds=1)
    assert time.monotonic() - started < 30
    assert (report.verdict, report.failed) == ("fail", ["dcgm"])
    assert checks(report)["dcgm"].detail == "dcgmi diag -r 2 did not finish within 1 s and was killed"
    assert report.dcgm.timed_out is True and report.dcgm.exit_code is None
    pid = int(child.read_text())
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text():
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"dcgmi's child {pid} survived the timeout")


def test_no_level_2_diagnostic_while_a_process_runs_on_the_gpu(
    env: SidecarEnv, tools: Tools, http: httpx.Client
) -> None:
    tools.dcgmi("pass-r2-v4.json")
    env.add_process(0, 4242, "0::/system.slice/job.service\n")
    report = validate(http, gpu_uuid(0), dcgm_level=2)
    assert report.failed == ["dcgm"] and checks(report)["dcgm"].verdict == "error"
    assert "would disturb them" in checks(report)["dcgm"].detail
    assert not tools.args.exists()  # dcgmi never ran
    assert validate(http, gpu_uuid(0), dcgm_level=1).verdict == "pass"  # level 1 is harmless


# ------------------------------------------------------------------------------------------ bug report


def diagnostics(http: httpx.Client, **body: Any) -> DiagnosticsReport:
    response = http.post("/v1/diagnostics", json=body or None)
    assert response.status_code == 200, response.text
    return DiagnosticsReport.model_validate(response.json())


BUG_REPORT = """\
out=""
while [ $# -gt 0 ]; do
  case "$1" in --output-file) out="$2"; shift;; esac
  shift
done
echo "collecting into $out" >&2
head -c {size} /dev/zero | tr '\\0' 'x' | gzip -1 -c > "$out.gz"
{tail}
"""


def test_without_the_script_there_is_no_report(http: httpx.Client) -> None:
    report = diagnostics(http)
    assert report.available is False and report.path is None
    assert report.detail.startswith("not available: nvidia-bug-report.sh not found at ")


def test_the_report_is_kept_on_the_node_with_its_digest(tools: Tools, http: httpx.Client) -> None:
    tools.script("nvidia-bug-report.sh", BUG_REPORT.format(size=1000, tail="echo done; exit 0"))
    report = diagnostics(http)
    assert (report.available, report.detail, report.truncated, report.exit_code) == (True, "", False, 0)
    assert report.path is not None
    path = Path(report.path)
    assert path.parent == tools.reports
    assert re.fullmatch(r"nvidia-bug-report-\d{8}T\d{6}Z\.log\.gz", path.name)
    assert report.size_bytes == path.stat().st_size
    assert report.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert report.argv == [str(tools.bin / "nvidia-bug-report.sh"), "--output-file", str(path)[:-3], "--safe-mode"]
    assert "done" in report.output_tail
    assert diagnostics(http, safe_mode=False).argv[-1] != "--safe-mode"


def test_a_report_past_the_size_bound_is_cut_and_marked(tools: Tools, http: httpx.Client) -> None:
    body = BUG_REPORT.format(size=1000, tail='head -c 200000 /dev/urandom >> "$out.gz"; sleep 30')
    tools.script("nvidia-bug-report.sh", body)
    report = diagnostics(http)
    assert report.truncated is True and report.size_bytes == MAX_BYTES
    assert report.path is not None and Path(report.path).stat().st_size == MAX_BYTES
    assert "grew past" in report.detail


def test_a_hung_script_is_stopped_at_the_timeout(tools: Tools, http: httpx.Client) -> None:
    tools.script("nvidia-bug-report.sh", "sleep 300\n")
    report = diagnostics(http, timeout_seconds=1)
    assert report.timed_out and report.exit_code is None and report.path is None
    assert report.detail == "nvidia-bug-report.sh did not finish within 1 s and was killed; it left no report"


async def test_one_report_at_a_time(tools: Tools, env: SidecarEnv) -> None:
    tools.script("nvidia-bug-report.sh", "sleep 2\n")
    async with httpx.AsyncClient(base_url=env.url, headers=AUTH, timeout=30) as client:
        first = asyncio.ensure_future(client.post("/v1/diagnostics", json={"timeout_seconds": 5}))
        await asyncio.sleep(0.5)
        second = await client.post("/v1/diagnostics")
        assert second.status_code == 409
        assert (await first).status_code == 200


# ------------------------------------------------------------------------------------------ the actions


def action_context(client: SidecarClient, *, uuid: str | None = None, index: str | None = None) -> ActionContext:
    kind = "gpu" if uuid or index else "node"
    return ActionContext(
        remediation_id="r1", step_name="validate",
        target=Target(kind=kind, node="gpu-a", gpu_uuid=uuid, gpu_index=index),
        settings=Settings(sidecar_token=TOKEN), dry_run=False, sidecar=client,
        gathered={"node": {"internal_ip": "127.0.0.1"}},
    )


@pytest.fixture
async def client(env: SidecarEnv) -> AsyncIterator[SidecarClient]:
    settings = Settings(sidecar_token=TOKEN, sidecar_port=env.sidecar.port)
    async with httpx.AsyncClient() as http:
        yield SidecarClient(settings, http, backoff_seconds=0)


async def test_validate_gpu_passes_the_remediation_s_gpu(client: SidecarClient) -> None:
    action = ValidateGpu()
    result = await action.run(action_context(client, uuid=gpu_uuid(1)), action.parse({}))
    assert result.output["verdict"] == "pass" and result.output["failed"] == {}
    [report] = result.output["gpus"]
    assert report["uuid"] == gpu_uuid(1) and report["checks"][0]["name"] == "present"
    assert result.message.startswith(f"{gpu_uuid(1)} passed validation")


async def test_validate_gpu_fails_the_step_naming_the_checks(
    env: SidecarEnv, tools: Tools, client: SidecarClient
) -> None:
    env.nvml.set("gpu.0.remap.pending", 1)
    tools.dcgmi("fail-r2-v4.json", exit_code=226)
    action = ValidateGpu()
    params = action.parse({"dcgm_level": 2, "require_dcgm": True, "timeout": "2m"})
    with pytest.raises(StepFailed) as caught:
        await action.run(action_context(client, index="0"), params)
    message = caught.value.message
    assert message.startswith(f"GPU validation failed: {gpu_uuid(0)}: remapped_rows.pending (a row remap is pending")
    assert "dcgm.memory (Hardware: GPU 0 had memory errors and row remappings are pending)" in message
    output = caught.value.output or {}
    assert output["verdict"] == "fail"
    assert output["failed"] == {gpu_uuid(0): ["remapped_rows.pending", "dcgm.memory"]}
    assert output["gpus"][0]["dcgm"]["level"] == 2


async def test_validate_all_gpus_includes_the_one_that_vanished(env: SidecarEnv, client: SidecarClient) -> None:
    env.nvml.set("gpu.1.removed", 1)
    action = ValidateGpu()
    with pytest.raises(StepFailed) as caught:
        await action.run(action_context(client, uuid=gpu_uuid(1)), action.parse({"gpu": "all"}))
    output = caught.value.output or {}
    assert [g["uuid"] for g in output["gpus"]] == [gpu_uuid(0), gpu_uuid(1)]
    assert output["failed"] == {gpu_uuid(1): ["present"]}
    assert caught.value.message == (
        f"GPU validation failed: {gpu_uuid(1)}: present ({gpu_uuid(1)} is not in NVML's device list)"
    )


def test_validate_gpu_parameters_are_checked() -> None:
    action = ValidateGpu()
    for bad in ({"gpu": "nvidia0"}, {"dcgm_level": 0}, {"timeout": "5h"}, {"expected_gpus": ["0"]}, {"x": 1}):
        with pytest.raises(ValueError, match="validation error"):
            action.parse(bad)
    assert action.parse({"gpu": "all", "timeout": 90}).timeout == 90  # type: ignore[attr-defined]


async def test_collect_diagnostics_references_the_bug_report(tools: Tools, client: SidecarClient) -> None:
    tools.script("nvidia-bug-report.sh", BUG_REPORT.format(size=500, tail="exit 0"))
    action = CollectDiagnostics()
    result = await action.run(action_context(client), action.parse({"bug_report": True, "timeout": "1m"}))
    report = result.output["bug_report"]
    assert report["available"] and report["path"].startswith(str(tools.reports))
    assert len(report["sha256"]) == 64
    assert [g["uuid"] for g in result.output["gpus"]] == [gpu_uuid(0), gpu_uuid(1)]  # a node target: every GPU
    assert f"bug report {report['path']}" in result.message


async def test_collect_diagnostics_without_the_script_still_succeeds(client: SidecarClient) -> None:
    action = CollectDiagnostics()
    result = await action.run(action_context(client, uuid=gpu_uuid(0)), action.parse({"bug_report": True}))
    assert result.output["bug_report"]["available"] is False
    assert result.output["gpu"]["uuid"] == gpu_uuid(0)
    assert "no bug report: not available" in result.message


# ------------------------------------------------------------------------------------------ unknown is not failed


async def test_a_lost_gpu_fails_the_gate_and_does_not_hide_the_others(
    env: SidecarEnv, client: SidecarClient
) -> None:
    env.nvml.set("gpu.0.lost", 1)  # NVML answers GPU_IS_LOST for everything about GPU 0
    report = validate_report(env, gpu_uuid(1))
    assert report.verdict == "pass" and checks(report)["present"].detail == "found at index 1"
    action = ValidateGpu()
    with pytest.raises(StepFailed) as caught:
        await action.run(action_context(client, uuid=gpu_uuid(0)), action.parse({"gpu": "all"}))
    output = caught.value.output or {}
    assert output["verdict"] == "fail"
    assert output["failed"] == {"0": ["present"], gpu_uuid(0): ["present"]}
    by_gpu = {g["gpu"]: g for g in output["gpus"]}
    assert "the GPU at index 0 is lost" in by_gpu["0"]["checks"][0]["detail"]
    assert "the GPU(s) at index 0 are lost" in by_gpu[gpu_uuid(0)]["checks"][0]["detail"]


async def test_checks_that_could_only_err_give_no_verdict(env: SidecarEnv, client: SidecarClient) -> None:
    env.nvml.set("err.nvmlDeviceGetCount_v2", 9)  # the driver is not loaded: NVML cannot list the GPUs
    action = ValidateGpu()
    with pytest.raises(GateUnknown) as caught:
        await action.run(action_context(client, uuid=gpu_uuid(1)), action.parse({}))
    unknown = caught.value
    assert unknown.agent == f"127.0.0.1:{env.sidecar.port}" and unknown.symptom == "unable to read the GPUs"
    assert "present (cannot list GPUs" in unknown.detail and "DRIVER_NOT_LOADED" in unknown.detail
    assert unknown.output["verdict"] == "unknown" and unknown.output["failed"] == {gpu_uuid(1): ["present"]}
    assert not isinstance(unknown, ActionError)  # a signal to wait, never a step failure


async def test_an_agent_that_cannot_be_read_gives_no_verdict(env: SidecarEnv) -> None:
    action = ValidateGpu()
    closed = free_port()
    cases = [
        (Settings(sidecar_token=TOKEN, sidecar_port=closed), {}, "unreachable", f"127.0.0.1:{closed}"),
        (Settings(sidecar_token="not-the-token", sidecar_port=env.sidecar.port), {}, "answering 401", None),
    ]
    env.nvml.set("err.nvmlSystemGetDriverVersion", 9)  # the inventory answers 503 (gpu: all reads it first)
    cases.append((Settings(sidecar_token=TOKEN, sidecar_port=env.sidecar.port), {"gpu": "all"}, "answering 503",
                   None))
    async with httpx.AsyncClient() as http:
        for settings, params, symptom, agent in cases:
            client = SidecarClient(settings, http, backoff_seconds=0)
            with pytest.raises(GateUnknown) as caught:
                await action.run(action_context(client, uuid=gpu_uuid(0)), action.parse(params))
            assert caught.value.symptom == symptom, caught.value.detail
            assert caught.value.agent == (agent or f"127.0.0.1:{env.sidecar.port}")
            assert caught.value.reason.startswith(f"gate unknown: agent {caught.value.agent} {symptom}")


async def test_a_refusal_before_sending_stays_an_error(client: SidecarClient) -> None:
    action = ValidateGpu()
    ctx = action_context(client, uuid=gpu_uuid(0))
    ctx.gathered = {"node": {"internal_ip": "gpu-a.example"}}  # not an IP: nothing is sent, no agent was asked
    with pytest.raises(Invalid, match="not a node IP address"):
        await action.run(ctx, action.parse({"gpu": "all"}))


def validate_report(env: SidecarEnv, gpu: str) -> ValidationReport:
    with httpx.Client(base_url=env.url, headers=AUTH, timeout=60.0) as http:
        return validate(http, gpu)
