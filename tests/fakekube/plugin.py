"""pytest fixtures for the fake Kubernetes API server: `fake_kube` and `kube_adapter`, one server per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from remediator.adapters.kube import KubeAdapter
from tests.fakekube.server import FakeKube


@pytest.fixture
async def fake_kube() -> AsyncIterator[FakeKube]:
    """A strict fake apiserver on 127.0.0.1; fails the test if the fake itself crashed on a request."""
    async with FakeKube() as fake:
        yield fake
        internal = fake.internal_errors()
    assert not internal, f"the fake apiserver failed internally: {internal!r}"


@pytest.fixture
async def kube_adapter(fake_kube: FakeKube) -> AsyncIterator[KubeAdapter]:
    """A KubeAdapter (official client, aiohttp) connected to `fake_kube` over real HTTP."""
    adapter = KubeAdapter.for_host(fake_kube.url, qps=1000.0)
    try:
        yield adapter
    finally:
        await adapter.close()
