"""One end-to-end stack per test module: Prometheus, Alertmanager, `remediator serve`, fake API, sidecar."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.e2e.stack import MissingBinary, Stack

SIDECAR_IP = "127.0.0.2"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """The whole chain, started once for the module; fails (never skips) when a binary is missing."""
    async for running in started(Stack(tmp_path_factory.mktemp("e2e"), sidecar_ip=SIDECAR_IP)):
        yield running


async def started(stack: Stack) -> AsyncIterator[Stack]:
    """`stack` started, then stopped once the module is done with it."""
    missing = None
    try:
        await stack.start()
    except MissingBinary as exc:
        missing = str(exc)
    except BaseException:
        await stack.stop()
        raise
    if missing is not None:
        await stack.stop()
        pytest.fail(missing, pytrace=False)
    try:
        yield stack
    finally:
        internal = stack.fake.internal_errors()
        await stack.stop()
    assert not internal, f"the fake apiserver failed internally: {internal!r}"
