"""Hot reload: file edits and ConfigMap symlink swaps are picked up, broken sets are refused with file:line,
running remediations keep the definitions they started with, and every used version stays retrievable."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import yaml

from remediator.api.app import _on_sighup
from tests.helpers import am_alert, am_payload, xid_labels
from tests.reload.conftest import MakeController, copy_definitions, edit, eventually, remove_step


def metric(controller_rt: object, name: str) -> float | None:
    registry = controller_rt.metrics.registry  # type: ignore[attr-defined]
    value = registry.get_sample_value(name)
    return None if value is None else float(value)


async def test_an_edited_playbook_file_is_picked_up_by_the_watcher(make_controller: MakeController) -> None:
    c = await make_controller()
    before = c.rt.definitions.current.version
    await c.reloader.start()
    assert c.reloader.watching
    edit(c.playbooks / "quarantine.yaml", "drain_pods: gpu", "drain_pods: all")
    await eventually(lambda: c.rt.definitions.current.version != before, what="new version in force")
    assert c.rt.definitions.current.playbooks["quarantine"].params["drain_pods"] == "all"
    outcome = c.rt.definitions.last_reload
    assert outcome is not None and outcome.ok and outcome.trigger == "watch" and outcome.changed
    assert metric(c.rt, "remediator_definitions_last_reload_success") == 1
    assert (metric(c.rt, "remediator_definitions_last_reload_timestamp_seconds") or 0) > 0
    assert before in c.rt.definitions.history  # the old set stays readable by version


async def test_touching_a_file_without_changing_it_reloads_nothing(make_controller: MakeController) -> None:
    c = await make_controller()
    await c.reloader.start(watch=False)
    book = c.playbooks / "record.yaml"
    stat = book.stat()
    os.utime(book, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    assert await c.reloader.check() is None
    assert c.rt.definitions.last_reload is None
    book.write_text(book.read_text() + "\n# a comment\n")
    outcome = await c.reloader.check()
    assert outcome is not None and outcome.ok and outcome.changed  # a comment is a new version of the file


def _configmap_mount(root: Path, revision: str, rules: Path, playbooks: Path) -> tuple[Path, Path]:
    """Lay out two directories the way the kubelet mounts ConfigMaps: files -> ..data/ -> ..<revision>/."""
    mounts = []
    for name, source in (("rules", rules), ("playbooks", playbooks)):
        mount = root / name
        data = mount / f"..{revision}"
        data.mkdir(parents=True)
        for file in source.iterdir():
            (data / file.name).write_text(file.read_text())
        (mount / "..data").symlink_to(data.name)
        for file in source.iterdir():
            (mount / file.name).symlink_to(Path("..data") / file.name)
        mounts.append(mount)
    return mounts[0], mounts[1]


def _swap(mount: Path, revision: str, changes: dict[str, str]) -> None:
    """Write a new revision directory and point ..data at it atomically, as the kubelet does."""
    current = mount / os.readlink(mount / "..data")
    fresh = mount / f"..{revision}"
    fresh.mkdir()
    for file in current.iterdir():
        (fresh / file.name).write_text(changes.get(file.name, file.read_text()))
    tmp = mount / "..data_tmp"
    tmp.symlink_to(fresh.name)
    os.replace(tmp, mount / "..data")


async def test_a_configmap_symlink_swap_is_picked_up(make_controller: MakeController, tmp_path: Path) -> None:
    rules, playbooks = copy_definitions(tmp_path / "source")
    rules_mount, playbooks_mount = _configmap_mount(tmp_path / "mnt", "2026_12_01_00_00_00.1", rules, playbooks)
    c = await make_controller(rules_mount, playbooks_mount)
    before = c.rt.definitions.current.version
    await c.reloader.start()
    text = (playbooks / "record.yaml").read_text().replace("reason: GPUAlert", "reason: GPUSeen")
    _swap(playbooks_mount, "2026_12_01_00_05_00.2", {"record.yaml": text})
    await eventually(lambda: c.rt.definitions.current.version != before, what="swap picked up")
    assert c.rt.definitions.current.playbooks["record"].params["reason"] == "GPUSeen"
    assert c.rt.definitions.current.sources["playbooks/record.yaml"] == text


async def test_an_invalid_edit_keeps_the_old_set_and_reports_file_and_line(make_controller: MakeController) -> None:
    c = await make_controller()
    await c.reloader.start(watch=False)
    good = c.rt.definitions.current.version
    book = c.playbooks / "quarantine.yaml"
    lines = book.read_text().splitlines()
    cordon = next(i for i, line in enumerate(lines) if line.strip() == "action: cordon")
    edit(book, "action: cordon", "action: cordn")

    r = await c.api.post("/api/v1/definitions/reload")
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["ok"] is False and body["version"] == good
    where = f"{book}:{cordon + 1}"
    assert any(e["text"].startswith(where) and "cordn" in e["text"] for e in body["errors"]), body["errors"]
    assert c.rt.definitions.current.version == good
    assert metric(c.rt, "remediator_definitions_last_reload_success") == 0

    status = (await c.api.get("/api/v1/definitions")).json()
    assert status["version"] == good and status["last_reload_ok"] is False
    assert any(where in e["text"] for e in status["last_reload"]["errors"])
    page = await c.api.get("/definitions")
    assert page.status_code == 200 and where in page.text and "refused" in page.text
    home = await c.api.get("/")
    assert "Definitions reload refused" in home.text and where in home.text
    audit = (await c.api.get("/api/v1/audit")).json()
    assert any(e["kind"] == "definitions.reload_refused" for e in audit)

    edit(book, "action: cordn", "action: cordon")
    r = await c.api.post("/api/v1/definitions/reload")
    assert r.status_code == 200 and r.json()["ok"] is True
    assert metric(c.rt, "remediator_definitions_last_reload_success") == 1


async def test_reload_needs_the_bearer_token(make_controller: MakeController) -> None:
    c = await make_controller()
    r = await c.api.post("/api/v1/definitions/reload", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert (await c.api.get("/api/v1/definitions", headers={"Authorization": ""})).status_code == 401


async def test_sighup_reloads(make_controller: MakeController) -> None:
    c = await make_controller()
    await c.reloader.start(watch=False)
    before = c.rt.definitions.current.version
    assert _on_sighup(c.reloader)
    try:
        edit(c.playbooks / "record.yaml", "reason: GPUAlert", "reason: GPUAlertSeen")
        os.kill(os.getpid(), signal.SIGHUP)
        await eventually(lambda: c.rt.definitions.current.version != before, what="SIGHUP reload")
    finally:
        import asyncio

        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
    last = c.rt.definitions.last_reload
    assert last is not None and last.trigger == "sighup"


async def test_a_running_remediation_finishes_on_the_version_it_started_with(
    make_controller: MakeController,
) -> None:
    c = await make_controller()
    await c.reloader.start(watch=False)
    old = c.rt.definitions.current.version
    r = await c.api.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("gpu-1", 79))))
    assert r.status_code == 200
    await c.worker.process_alerts()
    [first] = (await c.api.get("/api/v1/remediations")).json()
    assert first["state"] == "pending" and first["definitions_version"] == old

    remove_step(c.playbooks / "quarantine.yaml", "drain")
    outcome = await c.reloader.reload("test")
    assert outcome.ok and outcome.changed
    new = c.rt.definitions.current.version

    await c.worker.drain_idle()
    detail = (await c.api.get(f"/api/v1/remediations/{first['id']}")).json()
    assert detail["state"] == "planned"  # plan-only (no cluster): the old version's whole plan ran to its end
    assert [s["name"] for s in detail["steps"] if s["phase"] == "forward"] == ["taint", "cordon", "drain", "event"]
    assert detail["versions"]["definitions"] == old
    assert detail["versions"]["playbook_file"] == "playbooks/quarantine.yaml"

    r = await c.api.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("gpu-2", 79, uuid="GPU-2"))))
    await c.worker.drain_idle()
    rems = (await c.api.get("/api/v1/remediations", params={"node": "gpu-2"})).json()
    second = (await c.api.get(f"/api/v1/remediations/{rems[0]['id']}")).json()
    assert second["definitions_version"] == new
    assert [s["name"] for s in second["steps"] if s["phase"] == "forward"] == ["taint", "cordon", "event"]
    assert second["versions"]["playbook_file_sha"] != detail["versions"]["playbook_file_sha"]
    assert second["versions"]["rule"] == detail["versions"]["rule"]  # the rule itself did not change


async def test_each_version_returns_its_exact_yaml_also_after_a_restart(make_controller: MakeController) -> None:
    c = await make_controller()
    await c.reloader.start(watch=False)
    old = c.rt.definitions.current.version
    old_text = (c.playbooks / "quarantine.yaml").read_text()
    await c.api.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("gpu-1", 79))))
    await c.worker.process_alerts()
    edit(c.playbooks / "quarantine.yaml", "grace_period: 300", "grace_period: 60")
    assert (await c.reloader.reload("test")).changed

    r = await c.api.get(f"/api/v1/definitions/{old}", params={"file": "playbooks/quarantine.yaml"})
    assert r.status_code == 200 and r.text == old_text
    assert r.headers["content-type"].startswith("application/yaml")
    stream = (await c.api.get(f"/api/v1/definitions/{old}")).text
    assert "# file: playbooks/quarantine.yaml" in stream and "grace_period: 300" in stream
    docs = [d for d in yaml.safe_load_all(stream) if d is not None]
    assert len(docs) == len(c.rt.definitions.history[old].sources)
    as_json = (await c.api.get(f"/api/v1/definitions/{old}", params={"format": "json"})).json()
    assert as_json["files"]["playbooks/quarantine.yaml"] == old_text
    assert (await c.api.get("/api/v1/definitions/000000000000")).status_code == 404

    # A restart: a fresh controller on the same database holds only the current files in memory.
    await c.reloader.stop()
    await c.engine.dispose()
    restarted = await make_controller(c.rules, c.playbooks)
    assert old not in restarted.rt.definitions.history
    r = await restarted.api.get(f"/api/v1/definitions/{old}", params={"file": "playbooks/quarantine.yaml"})
    assert r.status_code == 200 and r.text == old_text
    status = (await restarted.api.get("/api/v1/definitions")).json()
    assert old in [v["version"] for v in status["stored"]]


async def test_a_running_controller_picks_up_an_edit_without_a_restart(tmp_path: Path) -> None:
    import httpx

    from remediator.api.app import create_app
    from remediator.settings import Settings
    from tests.reload.conftest import TOKEN

    rules, playbooks = copy_definitions(tmp_path / "defs")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}", webhook_token=[TOKEN], rules_dir=rules,
        playbooks_dir=playbooks, definitions_watch_interval=0.05,  # type: ignore[arg-type]
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        api = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        async with api:
            status = (await api.get("/api/v1/definitions")).json()
            assert status["watching"] is True
            before = status["version"]
            edit(rules / "gpu.yaml", "cooldown: 15m", "cooldown: 20m")

            async def changed() -> bool:
                return bool((await api.get("/api/v1/definitions")).json()["version"] != before)

            await eventually(changed, what="the edit in force")
        reloader = app.state.reloader
    assert not reloader.watching
