"""The `gpu_instance` target kind: one remediation per MIG GPU instance, not per GPU.

A playbook with `target: gpu_instance` keys its remediations (the active key, the rule's cooldown) on the GPU
instance the alert's `gpu_instance` label names, so contained Xids on two instances of one GPU start two
remediations and a repeat on one instance joins that instance's. An alert naming no instance, and every
`gpu` playbook (Xid 95, uncontained, whatever instance it names), keys on the whole GPU. The stored row gives
the same target back (its key carries the instance). `remediator check` refuses an unknown target kind and
warns about a rule that runs a `gpu_instance` playbook without requiring the label.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel

from remediator.actions.base import Target
from remediator.actions.drain import _gpu_selection
from remediator.actions.registry import default_registry
from remediator.definitions import DefinitionSet, check_paths, load_definitions
from remediator.definitions.loader import BUNDLED_PLAYBOOKS, BUNDLED_RULES
from remediator.engine.decision import DecisionFacts, DecisionPolicy, NoTarget, Start, decide_alert
from remediator.engine.ladder import new_remediation
from remediator.engine.planning import build_variables, target_for, target_of
from remediator.errors import DefinitionError
from remediator.intake.normalize import GpuAlert
from remediator.store.remediation_store import active_key_of

KNOWN_ACTIONS: dict[str, type[BaseModel]] = {name: a.Params for name, a in default_registry().items()}
UUID = "GPU-0c1d2e3f-0000-1111-2222-333344445555"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def defs() -> DefinitionSet:
    return load_definitions(BUNDLED_RULES, BUNDLED_PLAYBOOKS, KNOWN_ACTIONS)


def xid_alert(xid: int, *, node: str | None = "gpu-a", **extra: str) -> GpuAlert:
    labels = {"alertname": "GPUXidError", "xid": str(xid), "Hostname": node or "", "UUID": UUID, "gpu": "0", **extra}
    return GpuAlert(alertname="GPUXidError", status="firing", fingerprint=f"fp-{xid}-{extra}", kind="xid",
                    node=node, node_source="Hostname", gpu_uuid=UUID, gpu_index="0", xid=xid, labels=labels)


def started(alert: GpuAlert, defs: DefinitionSet) -> Start:
    decision = decide_alert(alert, defs, DecisionPolicy(), DecisionFacts(now=NOW))
    assert isinstance(decision, Start), decision
    return decision


def key_of(alert: GpuAlert, defs: DefinitionSet) -> str:
    """The active key the store gives the remediation this alert starts."""
    proposal = started(alert, defs).proposal
    return active_key_of(new_remediation(proposal, defs, {}))


def test_a_gpu_instance_target_keys_on_its_instance() -> None:
    three = Target(kind="gpu_instance", node="gpu-a", gpu_uuid=UUID, gpu_index="0", gpu_instance=3)
    five = Target(kind="gpu_instance", node="gpu-a", gpu_uuid=UUID, gpu_index="0", gpu_instance=5)
    assert three.key == f"gpu_instance:gpu-a/{UUID}/gi3" and five.key == f"gpu_instance:gpu-a/{UUID}/gi5"
    assert Target(kind="gpu", node="gpu-a", gpu_uuid=UUID).key == f"gpu:gpu-a/{UUID}"
    assert Target(kind="gpu_instance", node="gpu-a", gpu_index="1", gpu_instance=0).key == "gpu_instance:gpu-a/1/gi0"
    assert three.on_gpu and Target(kind="gpu").on_gpu and not Target(kind="node").on_gpu


def test_a_target_and_its_instance_must_agree() -> None:
    with pytest.raises(ValueError, match="gpu_instance target needs GPU instance id"):
        Target(kind="gpu_instance", node="gpu-a", gpu_uuid=UUID)
    with pytest.raises(ValueError, match="gpu target takes no GPU instance id"):
        Target(kind="gpu", node="gpu-a", gpu_uuid=UUID, gpu_instance=3)


def test_contained_xids_on_two_instances_of_one_gpu_get_two_active_keys(defs: DefinitionSet) -> None:
    on_3, on_5 = xid_alert(94, gpu_instance="3"), xid_alert(94, gpu_instance="5")
    assert started(on_3, defs).proposal.playbook.name == "drain-gpu-instance"
    assert key_of(on_3, defs) == f"gpu_instance:gpu-a/{UUID}/gi3|drain-gpu-instance"
    assert key_of(on_5, defs) == f"gpu_instance:gpu-a/{UUID}/gi5|drain-gpu-instance"


def test_a_repeat_on_the_same_instance_has_its_key(defs: DefinitionSet) -> None:
    """The detector writes the instance as the driver prints it (`GPU-I:05`): 05 and 5 are one instance."""
    first = xid_alert(94, gpu_instance="5")
    again = xid_alert(94, gpu_instance="05", err_msg="pid=4242")
    assert first.fingerprint != again.fingerprint
    assert key_of(first, defs) == key_of(again, defs)


def test_an_uncontained_xid_keys_on_the_whole_gpu_whatever_instance_it_names(defs: DefinitionSet) -> None:
    on_3, on_5 = xid_alert(95, gpu_instance="3"), xid_alert(95, gpu_instance="5")
    assert started(on_3, defs).proposal.playbook.name == "reset-gpu"
    assert key_of(on_3, defs) == key_of(on_5, defs) == f"gpu:gpu-a/{UUID}|reset-gpu"


@pytest.mark.parametrize("labels", [{}, {"gpu_instance": ""}, {"gpu_instance": "five"}, {"gpu_instance": "-1"}])
def test_a_gpu_instance_playbook_for_an_alert_naming_no_instance_targets_the_gpu(labels: dict[str, str]) -> None:
    target = target_for("gpu_instance", xid_alert(94, **labels))
    assert (target.kind, target.gpu_instance, target.key) == ("gpu", None, f"gpu:gpu-a/{UUID}")


def test_the_stored_row_gives_the_same_target_back(defs: DefinitionSet) -> None:
    proposal = started(xid_alert(94, gpu_instance="05"), defs).proposal
    row = new_remediation(proposal, defs, {})
    assert (row.target_kind, row.target_key) == ("gpu_instance", f"gpu_instance:gpu-a/{UUID}/gi5")
    assert target_of(row) == proposal.target and target_of(row).gpu_instance == 5


def test_a_stored_gpu_instance_key_without_its_instance_is_refused_by_name() -> None:
    class Row:
        target_kind, target_key, node, gpu_uuid, gpu_index, namespace, pod = (
            "gpu_instance", f"gpu:gpu-a/{UUID}", "gpu-a", UUID, "0", None, None)

    with pytest.raises(ValueError, match="names no GPU instance"):
        target_of(Row())


def test_templates_see_the_targets_instance(defs: DefinitionSet) -> None:
    alert = xid_alert(94, gpu_instance="3")
    target = started(alert, defs).proposal.target
    variables = build_variables(alert=alert, target=target, params={}, context={}, steps={}, xid={})
    assert variables["target"]["kind"] == "gpu_instance" and variables["target"]["gpu_instance"] == 3


def test_a_gpu_instance_target_needs_a_node(defs: DefinitionSet) -> None:
    decision = decide_alert(xid_alert(94, node=None, gpu_instance="3"), defs, DecisionPolicy(), DecisionFacts(now=NOW))
    assert isinstance(decision, NoTarget) and decision.proposal.target.kind == "gpu_instance"


INSTANCE = "      - gpu_instance=~\"[0-9]+\"\n"


def _definitions(tmp_path: Path, target: str, match: str) -> tuple[Path, Path]:
    rules, playbooks = tmp_path / "rules.yaml", tmp_path / "playbooks.yaml"
    rules.write_text(
        "rules:\n"
        "  - name: mig-contained\n"
        "    match:\n"
        "      - alertname=\"GPUXidError\"\n"
        f"{match}"
        "    playbook: tell\n"
    )
    playbooks.write_text(
        "name: tell\n"
        f"target: {target}\n"
        "steps:\n"
        "  - name: note\n"
        "    action: event\n"
        "    params: {reason: Contained, message: \"GPU instance {{ target.gpu_instance }}\"}\n"
    )
    return rules, playbooks


def test_check_refuses_an_unknown_target_kind_at_its_line(tmp_path: Path) -> None:
    rules, playbooks = _definitions(tmp_path, "instance", INSTANCE)
    [problem] = check_paths([rules, playbooks], KNOWN_ACTIONS)
    assert (problem.file, problem.line) == (str(playbooks), 2)
    assert "'node', 'gpu', 'gpu_instance' or 'namespace'" in problem.message


def test_check_warns_about_a_rule_that_does_not_require_the_instance(tmp_path: Path) -> None:
    rules, playbooks = _definitions(tmp_path, "gpu_instance", "")
    warnings: list[DefinitionError] = []
    assert check_paths([rules, playbooks], KNOWN_ACTIONS, warnings) == []
    [warning] = warnings
    assert warning.file == str(rules) and warning.line == 4  # the match list
    assert "targets a gpu_instance, but rule 'mig-contained' does not require a gpu_instance label" in warning.message


@pytest.mark.parametrize("match", [INSTANCE, "      - gpu_instance!=\"\"\n", "      - gpu_instance=\"3\"\n"])
def test_a_rule_requiring_the_instance_draws_no_warning(tmp_path: Path, match: str) -> None:
    rules, playbooks = _definitions(tmp_path, "gpu_instance", match)
    warnings: list[DefinitionError] = []
    assert check_paths([rules, playbooks], KNOWN_ACTIONS, warnings) == [] and warnings == []


def test_the_shipped_definitions_draw_no_warning() -> None:
    warnings: list[DefinitionError] = []
    assert check_paths([BUNDLED_RULES, BUNDLED_PLAYBOOKS], KNOWN_ACTIONS, warnings) == []
    assert [w.message for w in warnings if "gpu_instance" in w.message] == []


def test_a_drain_of_an_instance_written_with_a_leading_zero_selects_that_instances_pods() -> None:
    """`instance:<uuid>/05` and `instance:<uuid>/5` name one instance, as `instance_pods` keys it (`<uuid>/5`)."""
    pods = [{"namespace": "ml", "name": "slice-b", "uid": "u-b"}]
    context = {"instance_pods": {f"{UUID}/5": pods}, "gpu_pods": {UUID: [*pods, {"namespace": "ml", "name": "a"}]}}
    for selection in (f"instance:{UUID}/5", f"instance:{UUID}/05"):
        assert _gpu_selection(selection, context) == ({"u-b", "ml/slice-b"}, None), selection
