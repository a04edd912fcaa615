"""One thread for every NVML call, so the event loop never blocks and NVML calls never interleave.

NVML calls block (a reset takes seconds), and a power-limit change must read, remember and set without
another request slipping in between; one worker thread gives both for free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["NvmlWorker"]

T = TypeVar("T")


class NvmlWorker:
    """Runs blocking callables one at a time on a dedicated thread."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvml")

    async def run(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
