"""Controllers run as real processes: every one a test starts is stopped at its end."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.controller_process import ControllerProcess


@pytest.fixture
async def processes() -> AsyncIterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    yield started
    for p in started:
        await p.stop()
