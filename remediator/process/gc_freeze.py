"""Keeping what a process builds at start-up out of the cyclic garbage collector.

Both processes of `remediator serve` (the web process and, with REMEDIATOR_WORKER_PROCESS, the worker's)
call it once they have started.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_objects"]


def freeze_startup_objects() -> None:
    """Keep everything built so far out of the cyclic garbage collector, and collect young objects less often.

    What start-up builds (imported modules, definitions, ORM mappers, routes: ~170,000 objects) lives as long
    as the process. Left in the collector, every full collection walks all of it, a pause of 100-150 ms on a
    2-core VM that lands on whichever request is running; frozen, a full collection walks only what was made
    since. `remediator serve` calls this once the app has started; `bench/reads.py` calls it the same way.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)
