"""A raw HTTP client for the fake apiserver, so its tests control bodies and content types exactly.

These tests exercise the API server's own rules (writes, patches, evictions, watches), so their fake
answers every verb, as for a cluster admin; RBAC has its own tests (test_rbac.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakekube import FakeKube


class Raw:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        headers = {"Content-Type": content_type}
        async with self.session.request(
            method, self.base + path, json=body, headers=headers, params=params
        ) as resp:
            data = await resp.json(content_type=None)
            return resp.status, data, dict(resp.headers)

    async def get(self, path: str, **params: str) -> tuple[int, Any]:
        status, data, _ = await self.request("GET", path, params=params or None)
        return status, data

    async def smp(self, path: str, body: Any) -> tuple[int, Any]:
        status, data, _ = await self.request(
            "PATCH", path, body, content_type="application/strategic-merge-patch+json"
        )
        return status, data

    async def evict(
        self, namespace: str, name: str, options: dict[str, Any] | None = None
    ) -> tuple[int, Any, dict[str, str]]:
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if options:
            body["deleteOptions"] = options
        return await self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)


@pytest.fixture
async def fake_kube() -> AsyncIterator[FakeKube]:
    async with FakeKube(grants=None) as fake:
        yield fake
        internal = fake.internal_errors()
    assert not internal, f"the fake apiserver failed internally: {internal!r}"


@pytest.fixture
async def raw(fake_kube: FakeKube) -> AsyncIterator[Raw]:
    async with aiohttp.ClientSession() as session:
        yield Raw(session, fake_kube.url)
