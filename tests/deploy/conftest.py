"""Fixtures of the deploy tests."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.helpers import OVERLAYS, rendered


@pytest.fixture(params=sorted(OVERLAYS), ids=sorted(OVERLAYS))
def overlay(request: pytest.FixtureRequest) -> tuple[str, tuple[dict[str, Any], ...]]:
    return request.param, rendered(OVERLAYS[request.param])
