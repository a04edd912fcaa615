"""GPU identity (`GET /v1/gpus/{id}/identity`) and the `rma_report` action, through a real sidecar process on
the fake NVML, with a notifier that records what it is given."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from remediator.actions.base import ActionContext, Target
from remediator.actions.rma import MAX_TEXT, RmaReport, compose_summary
from remediator.actions.validation import ValidateGpu
from remediator.adapters.notifier import Message, slack_blocks
from remediator.adapters.sidecar import SidecarClient
from remediator.errors import Invalid, StepFailed
from remediator.settings import Settings
from remediator.sidecar.schemas import GpuIdentity
from tests.sidecar.conftest import TOKEN, SidecarEnv, free_port
from tests.sidecar.fakenvml import gpu_uuid

NOT_SUPPORTED = 3
GPU_IS_LOST = 15

HISTORY = [
    {"at": "2026-11-30T08:12:05Z", "alertname": "GpuXidError", "xid": 48, "playbook": "reset-gpu",
     "outcome": "succeeded", "remediation": "rem-0001"},
    {"at": "2026-12-01T17:40:51Z", "alertname": "GpuXidError", "xid": 94, "playbook": "reset-gpu",
     "outcome": "failed", "remediation": "rem-0002"},
    {"at": "2026-12-02T03:05:33Z", "alertname": "GpuRowRemapFailure", "playbook": "rma-gpu",
     "outcome": "running", "remediation": "rem-0003", "note": "remap failed after reset"},
]


class Outbox:
    """A notifier that keeps every message it is asked to send."""

    def __init__(self) -> None:
        self.sent: list[Message] = []

    async def send(self, message: Message) -> None:
        self.sent.append(message)


def identity(http: httpx.Client, gpu: str) -> GpuIdentity:
    response = http.get(f"/v1/gpus/{gpu}/identity")
    assert response.status_code == 200, response.text
    return GpuIdentity.model_validate(response.json())


# ------------------------------------------------------------------------------------------ the endpoint


def test_identity_by_uuid_names_the_board(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.1.remap.uncorrectable", 3)
    env.nvml.set("gpu.1.remap.failure", 1)
    found = identity(http, gpu_uuid(1))
    assert (found.gpu, found.uuid, found.index, found.name) == (gpu_uuid(1), gpu_uuid(1), 1, "NVIDIA H200")
    assert (found.serial, found.board_part_number, found.vbios_version) == (
        "1654923000001", "692-2G520-0280-000", "96.00.AF.00.01"
    )
    assert (found.pci_bus_id, found.driver_version) == ("00000000:19:00.0", "580.159.04")
    assert found.remapped_rows is not None
    assert found.remapped_rows.model_dump() == {"correctable": 0, "uncorrectable": 3, "pending": False,
                                                "failure": True}
    # H200s remap rows instead of retiring pages: that one field is unreadable, nothing else.
    assert found.retired_pages_pending is None
    assert found.unreadable == {"retired_pages_pending": "NOT_SUPPORTED"}


def test_identity_by_index_resolves_the_uuid(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.0.serial", "1324021012345")
    env.nvml.set("gpu.0.vbios", "96.00.99.00.07")
    found = identity(http, "0")
    assert (found.gpu, found.uuid, found.index) == ("0", gpu_uuid(0), 0)
    assert (found.serial, found.vbios_version) == ("1324021012345", "96.00.99.00.07")


def test_a_field_nvml_does_not_support_is_named_not_fatal(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("err.nvmlDeviceGetSerial.0", NOT_SUPPORTED)
    env.nvml.set("err.nvmlDeviceGetBoardPartNumber", NOT_SUPPORTED)
    found = identity(http, gpu_uuid(0))
    assert found.serial is None and found.board_part_number is None
    assert found.unreadable == {
        "serial": "NOT_SUPPORTED", "board_part_number": "NOT_SUPPORTED", "retired_pages_pending": "NOT_SUPPORTED",
    }
    assert (found.vbios_version, found.driver_version, found.name) == ("96.00.AF.00.01", "580.159.04", "NVIDIA H200")
    # Only GPU 0's serial was made unreadable.
    assert identity(http, gpu_uuid(1)).serial == "1654923000001"


def test_a_lost_gpu_still_answers_with_what_is_known(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.1.lost", 1)
    found = identity(http, gpu_uuid(1))
    assert found.uuid == gpu_uuid(1)
    assert found.serial is None and found.remapped_rows is None
    assert found.unreadable["serial"] == "GPU_IS_LOST"
    assert found.unreadable["vbios_version"] == "GPU_IS_LOST"
    assert "uuid" not in found.unreadable  # it was asked for by this UUID
    assert found.driver_version == "580.159.04"


@pytest.mark.parametrize(
    ("gpu", "status"), [("7", 404), (gpu_uuid(9), 404), ("nvidia0", 422), ("MIG-0000aaaa-aaaa-bbbb-cccc-0001", 422)]
)
def test_unknown_or_malformed_gpus_are_refused(http: httpx.Client, gpu: str, status: int) -> None:
    assert http.get(f"/v1/gpus/{gpu}/identity").status_code == status


def test_identity_needs_the_token_when_one_is_set(env: SidecarEnv) -> None:
    assert httpx.get(f"{env.url}/v1/gpus/0/identity", timeout=10).status_code == 401


# ------------------------------------------------------------------------------------------ the client and action


def action_context(
    client: SidecarClient | None, notifier: Outbox | None, *, uuid: str | None = None, index: str | None = None,
    dry_run: bool = False,
) -> ActionContext:
    return ActionContext(
        remediation_id="rem-0003", step_name="rma",
        target=Target(kind="gpu", node="gpu-node-1", gpu_uuid=uuid, gpu_index=index),
        settings=Settings(sidecar_token=TOKEN), dry_run=dry_run, sidecar=client, notifier=notifier,
        gathered={"node": {"internal_ip": "127.0.0.1"}},
    )


@pytest.fixture
async def client(env: SidecarEnv) -> AsyncIterator[SidecarClient]:
    settings = Settings(sidecar_token=TOKEN, sidecar_port=env.sidecar.port)
    async with httpx.AsyncClient() as http:
        yield SidecarClient(settings, http, backoff_seconds=0)


@pytest.fixture
async def unreachable() -> AsyncIterator[SidecarClient]:
    """A client for a port on 127.0.0.1 where nothing listens."""
    settings = Settings(sidecar_token=TOKEN, sidecar_port=free_port())
    async with httpx.AsyncClient() as http:
        yield SidecarClient(settings, http, attempts=2, backoff_seconds=0)


async def test_client_identity_parses_the_answer_and_refuses_bad_ids(client: SidecarClient) -> None:
    found = await client.identity("127.0.0.1", "1")
    assert (found.uuid, found.serial) == (gpu_uuid(1), "1654923000001")
    with pytest.raises(Invalid, match="not a GPU UUID or index"):
        await client.identity("127.0.0.1", "../gpus")


async def test_rma_report_sends_identity_history_gate_and_bug_report(
    env: SidecarEnv, client: SidecarClient
) -> None:
    env.nvml.set("gpu.0.remap.failure", 1)
    env.nvml.set("gpu.0.remap.uncorrectable", 5)
    env.nvml.set("gpu.0.vbios", "96.00.99.00.07")
    # The gate as a playbook would pass it: the failed validate_gpu step's output.
    validate = ValidateGpu()
    with pytest.raises(StepFailed) as failed_gate:
        await validate.run(action_context(client, None, uuid=gpu_uuid(0)), validate.parse({}))
    gate = failed_gate.value.output
    outbox = Outbox()
    action = RmaReport()
    params = action.parse({"history": HISTORY, "gate": gate, "bug_report": "/var/lib/remediator/bug-report.log.gz",
                           "channel": "#gpu-rma"})

    result = await action.run(action_context(client, outbox, uuid=gpu_uuid(0)), params)

    [message] = outbox.sent
    text = message.text
    for expected in (
        "Serial: 1654923000000", "VBIOS: 96.00.99.00.07", "Board part number: 692-2G520-0280-000",
        "Model: NVIDIA H200", "Driver: 580.159.04", f"GPU UUID: {gpu_uuid(0)} (index 0)", "Node: gpu-node-1",
        "Remapped rows: 0 correctable, 5 uncorrectable, pending: no, failed remap: yes",
        "2026-11-30T08:12:05Z, Xid 48, GpuXidError, playbook reset-gpu, outcome succeeded, remediation rem-0001",
        "2026-12-01T17:40:51Z, Xid 94", "2026-12-02T03:05:33Z, GpuRowRemapFailure",
        "note=remap failed after reset",
        "Failed validation checks (gate verdict: fail):",
        "- remapped_rows.failure (row remapping failed: the memory cannot be repaired, replace the GPU",
        "Bug report: /var/lib/remediator/bug-report.log.gz on node gpu-node-1",
    ):
        assert expected in text, (expected, text)
    assert "Retired pages pending" not in text and "unknown (" not in text
    assert (message.event, message.channel, message.remediation_id) == ("rma_report", "#gpu-rma", "rem-0003")
    assert ("Serial", "1654923000000") in message.fields
    assert message.data["rma"]["serial"] == "1654923000000"

    output = result.output
    assert (result.changed, output["sent"], output["text"]) == (False, True, text)
    assert (output["uuid"], output["serial"], output["vbios_version"], output["name"]) == (
        gpu_uuid(0), "1654923000000", "96.00.99.00.07", "NVIDIA H200"
    )
    assert output["remapped_rows"] == {"correctable": 0, "uncorrectable": 5, "pending": False, "failure": True}
    assert output["failed_checks"][0].startswith("remapped_rows.failure (row remapping failed")
    assert (output["gate_verdict"], output["history_rows"], output["unknown"]) == ("fail", 3, {})
    assert output["node_ip"] == "127.0.0.1" and output["identity_error"] is None


async def test_an_unreadable_serial_is_named_and_the_summary_still_goes(
    env: SidecarEnv, client: SidecarClient
) -> None:
    env.nvml.set("err.nvmlDeviceGetSerial.1", NOT_SUPPORTED)
    outbox = Outbox()
    action = RmaReport()
    result = await action.run(action_context(client, outbox, index="1"), action.parse({"history": HISTORY[:1]}))
    [message] = outbox.sent
    assert "Serial: unknown (NOT_SUPPORTED)" in message.text
    assert "VBIOS: 96.00.AF.00.01" in message.text
    assert result.output["unknown"] == {"serial": "NOT_SUPPORTED"}
    assert result.output["uuid"] == gpu_uuid(1)
    assert "unknown: serial" in result.message


async def test_an_unreachable_sidecar_still_sends_the_summary(unreachable: SidecarClient) -> None:
    outbox = Outbox()
    action = RmaReport()
    gate = {"verdict": "fail", "failed": ["remapped_rows.failure"], "uuid": gpu_uuid(0), "gpu": gpu_uuid(0),
            "checks": [{"name": "remapped_rows.failure", "verdict": "fail", "detail": "row remapping failed"}]}
    result = await action.run(
        action_context(unreachable, outbox, uuid=gpu_uuid(0)),
        action.parse({"history": HISTORY, "gate": gate, "bug_report": "/tmp/report.log.gz"}),
    )
    [message] = outbox.sent
    text = message.text
    assert f"GPU UUID: {gpu_uuid(0)}" in text
    for label in ("Serial", "VBIOS", "Board part number", "Model", "Driver", "Remapped rows"):
        assert f"{label}: unknown (sidecar did not answer)" in text
    assert "Identity not read from the node: sidecar http://127.0.0.1:" in text and "unreachable" in text
    assert "2026-12-01T17:40:51Z, Xid 94" in text
    assert "- remapped_rows.failure (row remapping failed)" in text
    assert "Bug report: /tmp/report.log.gz" in text
    assert result.output["sent"] is True and result.output["serial"] is None
    assert result.output["unknown"]["serial"] == "sidecar did not answer"
    assert "unreachable" in result.output["identity_error"]


async def test_without_a_sidecar_client_the_summary_says_why(env: SidecarEnv) -> None:
    outbox = Outbox()
    action = RmaReport()
    result = await action.run(action_context(None, outbox, uuid=gpu_uuid(0)), action.parse({}))
    assert "no sidecar client configured" in outbox.sent[0].text
    assert "Validation gate: no result given" in outbox.sent[0].text
    assert result.output["sent"] is True


async def test_a_dry_run_describes_and_sends_nothing(client: SidecarClient) -> None:
    outbox = Outbox()
    action = RmaReport()
    result = await action.run(action_context(client, outbox, uuid=gpu_uuid(0), dry_run=True),
                              action.parse({"history": HISTORY, "channel": "#gpu-rma"}))
    assert outbox.sent == []
    assert result.output == {"dry_run": True, "sent": False, "gpu": gpu_uuid(0), "channel": "#gpu-rma",
                             "history_rows": 3}
    assert result.message.startswith(f"dry run: would rma_report(the remediation's GPU: identity from the sidecar, "
                                     f"3 history rows) to #gpu-rma on gpu:gpu-node-1/{gpu_uuid(0)}")


async def test_without_a_notifier_the_summary_is_only_returned(client: SidecarClient) -> None:
    action = RmaReport()
    result = await action.run(action_context(client, None, uuid=gpu_uuid(0)), action.parse({}))
    assert result.output["sent"] is False and "Serial: 1654923000000" in result.output["text"]
    assert result.message.startswith("no notifier configured")


# ------------------------------------------------------------------------------------------ params and text size


def test_rma_report_parameters_are_bounded() -> None:
    action = RmaReport()
    row = {"at": "2026-12-01T00:00:00Z", "xid": 79}
    assert len(action.parse({"history": [row] * 200}).history) == 200  # type: ignore[attr-defined]
    for bad in (
        {"history": [row] * 201},
        {"history": [{"at": "x", "detail": "y" * 5000}]},
        {"history": ["not a row"]},
        {"gpu": "nvidia0"},
        {"gpu": "MIG-0000aaaa-aaaa-bbbb-cccc-0001"},
        {"channel": "#" + "c" * 100},
        {"unknown": 1},
    ):
        with pytest.raises(ValueError, match="validation error"):
            action.parse(bad)


def test_a_long_history_is_cut_to_fit_one_message() -> None:
    facts: dict[str, Any] = {"node": "gpu-node-1", "uuid": gpu_uuid(0), "serial": "1654923000000", "unknown": {}}
    history = [
        {"at": f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00Z", "alertname": "GpuXidError", "xid": 31,
         "playbook": "reset-gpu", "outcome": "succeeded", "remediation": f"rem-{i:04d}"}
        for i in range(200)
    ]
    failed = [f"- check.{i} ({'d' * 150})" for i in range(30)]
    text = compose_summary(facts, history, failed)
    assert len(text) <= MAX_TEXT
    assert "Serial: 1654923000000" in text and "Bug report: none given" in text
    assert "Xid/fault history (200 rows):" in text
    assert "2026-11-01T00:00:00Z, Xid 31" in text  # the oldest rows come first
    assert text.rstrip().endswith("more rows (all in the step's input)")
    assert "more failed checks" in text
    # Slack shows the whole summary: nothing is cut by the block's own limit.
    section = slack_blocks(Message(event="rma_report", title="t", text=text))[1]["text"]["text"]
    assert section.endswith("more rows (all in the step's input)")
