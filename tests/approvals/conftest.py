"""Fixtures for approval tests: a plan-only controller with a gated playbook."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.approvals.harness import Gated, gated_controller


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[Gated]:
    async with gated_controller(tmp_path) as controller:
        yield controller
