"""The chain as the `single` overlay runs the controller: with REMEDIATOR_WORKER_PROCESS, webhooks are spooled
by the web process and decided and remediated by the worker process.

The same tests as test_chain.py, against a stack of their own: Alertmanager's delivery of a real Xid rule
reaches the cluster (taint, cordon, drain, reboot, return), and a delivery refused while the web process
cannot write (503) is retried by Alertmanager, stored once and remediated once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.e2e.conftest import SIDECAR_IP, started
from tests.e2e.stack import Stack
from tests.e2e.test_chain import (  # collected here too, with this module's stack
    test_alertmanager_retry_after_503_delivers_once_the_store_is_back_and_is_processed_once,
    test_xid79_taints_cordons_and_drains_and_the_reboot_returns_the_node,
)

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

__all__ = [
    "test_alertmanager_retry_after_503_delivers_once_the_store_is_back_and_is_processed_once",
    "test_xid79_taints_cordons_and_drains_and_the_reboot_returns_the_node",
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    controller = {"REMEDIATOR_WORKER_PROCESS": "true"}
    async for running in started(Stack(tmp_path_factory.mktemp("e2e-wp"), sidecar_ip=SIDECAR_IP,
                                       controller_env=controller)):
        assert running.controller is not None
        assert (running.workdir / "controller.intake.db").exists(), "webhooks go to the intake spool"
        yield running
