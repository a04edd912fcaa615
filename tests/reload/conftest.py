"""A plan-only controller over a copy of a small definition set that a test may edit, with helpers."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.reload import DefinitionsReloader
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.settings import Settings

TOKEN = "reload-token"


async def eventually(check: Callable[[], Awaitable[bool] | bool], deadline: float = 20.0, what: str = "") -> None:
    """Poll `check` until it holds; fail after `deadline` seconds (a bound, never a timing assertion)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > end:
            pytest.fail(f"condition not reached within {deadline}s: {what}")
        await asyncio.sleep(0.02)


FIXED_DEFS = Path(__file__).resolve().parents[1] / "replay" / "defs"


def copy_definitions(root: Path) -> tuple[Path, Path]:
    """A copy of a small fixed definition set (the shipped one changes as playbooks are added)."""
    shutil.copytree(FIXED_DEFS, root)
    return root / "rules", root / "playbooks"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def remove_step(playbook: Path, name: str) -> None:
    """Delete one `- name: <name>` step block from a playbook file, keeping the rest byte for byte."""
    lines = playbook.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == f"- name: {name}")
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and not (
        lines[end].strip().startswith("- ") and len(lines[end]) - len(lines[end].lstrip()) == indent
    ):
        end += 1
    playbook.write_text("".join(lines[:start] + lines[end:]))


@dataclass
class Controller:
    rt: Runtime
    engine: AsyncEngine
    app: FastAPI
    api: httpx.AsyncClient
    worker: Worker
    reloader: DefinitionsReloader
    settings: Settings
    rules: Path
    playbooks: Path


MakeController = Callable[..., Awaitable[Controller]]


@pytest.fixture
async def make_controller(tmp_path: Path) -> AsyncIterator[MakeController]:
    made: list[Controller] = []

    async def make(rules: Path | None = None, playbooks: Path | None = None, **overrides: Any) -> Controller:
        if rules is None or playbooks is None:
            rules, playbooks = copy_definitions(tmp_path / "defs")
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", webhook_token=[TOKEN], rules_dir=rules,
            playbooks_dir=playbooks, worker_poll_interval=0.05,  # type: ignore[arg-type]
            definitions_watch_interval=0.05,  # type: ignore[arg-type]
            **overrides,
        )
        rt, engine = await build_runtime(settings, connect_kube=False)
        app = create_app(settings, runtime=rt, run_worker=False)
        worker = Worker(rt)
        app.state.worker = worker
        reloader = DefinitionsReloader(rt)
        app.state.reloader = reloader
        api = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        controller = Controller(rt, engine, app, api, worker, reloader, settings, rules, playbooks)
        made.append(controller)
        return controller

    yield make
    for controller in made:
        await controller.reloader.stop()
        await controller.worker.stop()
        await controller.api.aclose()
        await controller.engine.dispose()
