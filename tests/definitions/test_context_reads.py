"""A template never meets a context key that may be missing.

Without cluster access (plan-only, or a node that was not found) the context holds only the alert's pods and
the node's name; `context.node.boot_id`, `context.node.labels`, `context.gpu_pods` and the like come only
when the engine could read them. `remediator check` (and so every load) refuses a template that reads such a
key unguarded, at its file and line; the shipped playbooks render every step, gate step and undo against
that minimal context; and the README's first alert, with no cluster, can be reverted: the `reboot-node`
gate is planned ("wait for node ... to run a new boot", then validate the GPUs), not failed on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remediator.definitions import load_definitions
from remediator.definitions.loader import BUNDLED_PLAYBOOKS, BUNDLED_RULES
from remediator.definitions.templates import check_template, render_params
from remediator.definitions.variables import CONTEXT_ALWAYS
from remediator.errors import TemplateProblem
from tests.approvals.harness import TOKEN, gated_controller
from tests.definitions.test_bundled import KNOWN_ACTIONS, _variables
from tests.helpers import am_alert, am_payload

# What every context carries, and nothing more: what plan-only mode without a cluster gathers.
MINIMAL_CONTEXT: dict[str, Any] = {"pods": [], "pod_source": "none", "node": {"name": "gpu-node-1"}}


@pytest.mark.parametrize(
    "template",
    [
        "{{ context.node.get('boot_id') }}",
        "{{ context['node'].get('boot_id', 'none') }}",
        "{{ context.node.boot_id | default(none) }}",
        "{{ context.node.boot_id | d('unknown') }}",
        "{% if context.node.boot_id is defined %}{{ context.node.boot_id }}{% endif %}",
        "{% if context.gpu_pods is undefined %}none{% else %}{{ context.gpu_pods }}{% endif %}",
        "{{ context.node.boot_id if context.node.boot_id is defined and params.x else 'unknown' }}",
        "{{ context.node.name }}-{{ context['node']['name'] }}",
        "{{ context.pods | length }} {{ context.pod_source }} {% for p in context.pods %}{{ p.name }}{% endfor %}",
        "{{ context.pods[0].namespace if context.pods else '' }}",
        "{{ context.get('gpu_uuid') or gpu.uuid }}",
        "{{ context | tojson }}",
        "{{ 'x' if context.node.ready is undefined else context.node.ready }}",
        "{{ context.node[params.key] }}",  # a computed key: only what leads to it is known
    ],
)
def test_guarded_or_always_present_context_reads_pass(template: str) -> None:
    check_template(template)


@pytest.mark.parametrize(
    ("template", "missing"),
    [
        ("{{ context.node.boot_id }}", "context.node.boot_id"),
        ("{{ context['node']['labels'] }}", "context.node.labels"),
        ("{{ context.node.labels.zone | default('x') }}", "context.node.labels"),  # default guards the last key only
        ("{{ context.node.labels.get('zone') }}", "context.node.labels"),
        ("{% if context.gpu_pods %}x{% endif %}", "context.gpu_pods"),
        ("{{ context.sidecar_error }}", "context.sidecar_error"),
        (
            "{% if context.node.boot_id is defined %}{% else %}{{ context.node.boot_id }}{% endif %}",
            "context.node.boot_id",
        ),
        ("{{ 'x' if context.node.ready is defined else context.node.ready }}", "context.node.ready"),
    ],
)
def test_unguarded_reads_of_keys_not_always_there_are_refused(template: str, missing: str) -> None:
    with pytest.raises(TemplateProblem) as info:
        check_template(template)
    assert f"template reads {missing}," in str(info.value)
    assert ".get(" in str(info.value) and "| default(...)" in str(info.value)


def test_the_problem_names_the_line_inside_the_template() -> None:
    with pytest.raises(TemplateProblem) as info:
        check_template("line one\n{{ context.node.name }}\nthree {{ context.node.boot_id }}\n")
    assert info.value.line == 3


def test_remediator_check_refuses_such_a_template_at_its_file_and_line(tmp_path: Path) -> None:
    rules, playbooks = tmp_path / "rules", tmp_path / "playbooks"
    rules.mkdir()
    playbooks.mkdir()
    (rules / "r.yaml").write_text(
        "rules:\n  - name: fatal\n    match: ['alertname=\"GPUXidError\"']\n    playbook: back\n"
    )
    (playbooks / "p.yaml").write_text(
        "name: back\n"
        "target: node\n"
        "on_resolved: revert\n"
        "return_gate:\n"
        "  - name: rebooted\n"
        "    action: await_reboot\n"
        "    params:\n"
        "      boot_id: \"{{ context.node.boot_id }}\"\n"
        "steps:\n"
        "  - name: cordon\n"
        "    action: cordon\n"
        "    revert:\n"
        "      action: uncordon\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "remediator.cli", "check", str(rules), str(playbooks)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{playbooks / 'p.yaml'}:8: template reads context.node.boot_id," in done.stdout, done.stdout
    assert "return_gate[0].params.boot_id" in done.stdout


def test_every_shipped_step_gate_and_undo_renders_against_the_minimal_context() -> None:
    assert set(MINIMAL_CONTEXT) == set(CONTEXT_ALWAYS) and set(MINIMAL_CONTEXT["node"]) == {"name"}
    defs = load_definitions(BUNDLED_RULES, BUNDLED_PLAYBOOKS, KNOWN_ACTIONS)
    rendered = 0
    for playbook in defs.playbooks.values():
        variables = {**_variables(defs, "GPUXidError", 79, dict(playbook.params)), "context": MINIMAL_CONTEXT}
        for step in (*playbook.steps, *playbook.return_gate):
            params = render_params(step.params, variables)
            KNOWN_ACTIONS[step.action].model_validate(params)
            rendered += 1
            if step.revert:
                KNOWN_ACTIONS[step.revert.action].model_validate(render_params(step.revert.params, variables))
    assert rendered > 20
    gate = defs.playbooks["reboot-node"].return_gate[0]
    assert render_params(gate.params, {"context": MINIMAL_CONTEXT, "params": {}})["boot_id"] is None


def xid_79(status: str = "firing") -> dict[str, Any]:
    """The README's first alert."""
    labels = {
        "alertname": "GPUXidError", "Hostname": "gpu-node-1", "UUID": "GPU-8e6a1c2d-0000-4000-8000-000000000001",
        "gpu": "0", "modelName": "NVIDIA H200", "xid": "79",
    }
    alert = am_alert(labels, status=status, annotations={"summary": "Xid 79 on gpu-node-1 GPU 0"})
    alert["fingerprint"] = "3f2a9c0d1e2b4a5f"
    return am_payload(alert)


@pytest.mark.parametrize("how", ["revert", "resolved"])
async def test_the_first_alert_without_a_cluster_returns_through_a_planned_gate(tmp_path: Path, how: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with gated_controller(tmp_path, rules_dir=BUNDLED_RULES, playbooks_dir=BUNDLED_PLAYBOOKS) as gated:
        assert gated.rt.kube is None  # plan-only: no cluster credentials
        r = await gated.client.post("/api/v1/alerts", json=xid_79(), headers=auth)
        assert r.status_code == 200, r.text
        await gated.settle()
        (rem,) = await gated.rt.repo.list_remediations()
        assert rem.playbook == "reboot-node"
        if how == "revert":
            r = await gated.client.post(f"/api/v1/remediations/{rem.id}/revert", headers=auth)
        else:
            r = await gated.client.post("/api/v1/alerts", json=xid_79("resolved"), headers=auth)
        assert r.status_code == 200, r.text
        await gated.settle()
        r = await gated.client.get(f"/api/v1/remediations/{rem.id}", headers=auth)
    body = r.json()
    assert body["state"] == "reverted", (body["state"], body["state_reason"], body["steps"])
    gate = {s["name"]: s for s in body["steps"] if s["phase"] == "revert" and s["name"].startswith("gate:")}
    assert [gate[name]["status"] for name in ("gate:rebooted", "gate:validate")] == ["planned", "planned"]
    said = gate["gate:rebooted"]["output"]["message"]
    assert "wait for node gpu-node-1 to run a new boot" in said and "recorded at quarantine" in said, said
    assert gate["gate:rebooted"]["params"] == {"boot_id": None, "poll": "30s"}
    assert "validate_gpu" in gate["gate:validate"]["output"]["message"]
