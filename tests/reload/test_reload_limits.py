"""A reload cannot hang the controller: an alias bomb is refused at its line, and a load that runs past
`definitions_load_timeout` is refused while the set in force keeps serving."""

from __future__ import annotations

import threading

from remediator.definitions import DefinitionSet
from remediator.engine.reload import DefinitionsReloader
from tests.definitions.test_evaluation_budget import BOMB_272
from tests.reload.conftest import MakeController


async def test_an_alias_bomb_dropped_into_the_playbooks_is_refused_at_its_line(
    make_controller: MakeController,
) -> None:
    c = await make_controller()
    await c.reloader.start(watch=False)
    good = c.rt.definitions.current.version
    bomb = c.playbooks / "bomb.yaml"
    bomb.write_text("name: bomb\n" + BOMB_272)
    r = await c.api.post("/api/v1/definitions/reload")
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert any(e["text"].startswith(f"{bomb}:") and "alias" in e["text"] for e in errors), errors
    assert c.rt.definitions.current.version == good
    assert (await c.api.get("/healthz")).status_code == 200


async def test_a_load_past_the_time_limit_is_refused_and_the_old_set_stays(make_controller: MakeController) -> None:
    c = await make_controller(definitions_load_timeout=0.2)
    await c.reloader.start(watch=False)
    current = c.rt.definitions.current
    release = threading.Event()
    calls: list[int] = []

    def stuck_load() -> DefinitionSet:
        calls.append(1)
        release.wait(30)  # a load that does not finish on its own
        return current

    slow = DefinitionsReloader(c.rt, load=stuck_load)
    try:
        first = await slow.reload("api")
        assert not first.ok
        assert "took longer than 0.2s" in first.errors[0].message
        assert c.rt.definitions.current.version == current.version
        assert (await c.api.get("/healthz")).status_code == 200  # the event loop still answers
        second = await slow.reload("api")  # the first load is still running: no second one piles up
        assert not second.ok and "still running" in second.errors[0].message
        assert calls == [1]
    finally:
        release.set()
    await slow.stop()
