"""Alert text is data: a step's templates are rendered once, and an undo never renders what was rendered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import remediator.definitions.templates as templates
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.definitions import NOTE_PLAYBOOK, NOTE_RULE, definitions, note_alert
from tests.helpers import am_payload

NOTE_KEY = "example.com/note"


async def _revert_steps(cluster: Cluster) -> list[dict[str, Any]]:
    rem = await cluster.only_remediation()
    return [s for s in rem["steps"] if s["phase"] == "revert"]


async def test_a_default_undo_takes_the_rendered_params_verbatim(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster: Cluster = await make_cluster(**definitions(tmp_path, NOTE_RULE, NOTE_PLAYBOOK))
    cluster.fake.add_node("gpu-1")
    text = "hello {{ 6*7 }}"
    await cluster.post(am_payload(note_alert("gpu-1", text)))
    await cluster.settle()
    node = cluster.fake.node("gpu-1")
    assert node is not None and node["metadata"]["annotations"][NOTE_KEY] == text

    rem = await cluster.only_remediation()
    r = await cluster.api.post(f"/api/v1/remediations/{rem['id']}/revert")
    assert r.status_code == 200, r.text
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "reverted"
    undo = next(s for s in await _revert_steps(cluster) if s["name"] == "revert:note")
    assert undo["action"] == "unannotate" and undo["status"] == "succeeded"
    assert undo["params"] == {"key": NOTE_KEY, "value": text}
    assert "hello 42" not in repr(rem)
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    assert "hello 42" not in repr(audit)
    started = [e for e in audit if e["kind"] == "step.started" and e["data"]["step"] == "revert:note"]
    assert [e["data"]["params"]["value"] for e in started] == [text]
    node = cluster.fake.node("gpu-1")
    assert node is not None and NOTE_KEY not in (node["metadata"].get("annotations") or {})


# Nested loops over the sandbox's largest range: 10^15 iterations if anything ever evaluated it.
BOMB = (
    "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}x"
    "{% endfor %}{% endfor %}{% endfor %}"
)


@pytest.mark.timeout(90)
async def test_a_template_bomb_in_an_annotation_is_never_evaluated(
    make_cluster: MakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster(**definitions(tmp_path, NOTE_RULE, NOTE_PLAYBOOK))
    cluster.fake.add_node("gpu-1")
    compiled: list[str] = []
    real_parse_template = templates._parse_template

    def spy(source: str) -> Any:
        compiled.append(source)
        return real_parse_template(source)

    monkeypatch.setattr(templates, "_parse_template", spy)

    # The remediation runs and is undone while the webhook, /healthz and the worker keep answering.
    async with asyncio.timeout(60):
        await cluster.post(am_payload(note_alert("gpu-1", BOMB)))
        await cluster.settle()
        rem = await cluster.only_remediation()
        assert (await cluster.api.post(f"/api/v1/remediations/{rem['id']}/revert")).status_code == 200
        undo = asyncio.create_task(cluster.settle())
        cluster.fake.add_node("gpu-2")
        await cluster.post(am_payload(note_alert("gpu-2", "plain")))
        assert (await cluster.api.get("/healthz")).status_code == 200
        await undo
        await cluster.settle()

    assert not [source for source in compiled if "range(100000)" in source]
    rems = (await cluster.api.get("/api/v1/remediations")).json()
    assert sorted(r["state"] for r in rems) == ["reverted", "succeeded"]
    bombed = next(r for r in rems if r["state"] == "reverted")
    detail = (await cluster.api.get(f"/api/v1/remediations/{bombed['id']}")).json()
    undo = next(s for s in detail["steps"] if s["name"] == "revert:note")
    assert undo["params"]["value"] == BOMB and undo["status"] == "succeeded"
    node = cluster.fake.node("gpu-2")
    assert node is not None and node["metadata"]["annotations"][NOTE_KEY] == "plain"
