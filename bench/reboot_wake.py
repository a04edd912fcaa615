"""bench/reboot_wake: node Ready from a new boot -> the return gate's validation started.

A node quarantined for Xid 79 waits in its return gate (`await_reboot`) until it runs a new boot and is Ready.
The step looks again every `poll` (30 s in the shipped reboot-node playbook); the node watch
(engine/hand_changes.py) makes the remediation due as soon as it sees the node Ready with a new boot ID.
This measures, per run, from the moment the kubelet's status write (new bootID, Ready=True) reaches the strict
fake API server to the moment the next gate step (`gate:validate`) is begun (its step row's started_at), in two
modes in the same run:

- `watch`: REBOOT_WATCH_WAKE=true (the default);
- `poll` (the baseline): REBOOT_WATCH_WAKE=false, the step's own 30 s look.

In process: the controller's worker (its loop, its node watch) and API over the strict fake API server on
127.0.0.1, SQLite, the gate's GPU validation replaced by a pass (no node agent here). Each run quarantines a
node of its own (gpu-N), resolves its alert, and reboots the node at a random moment of the step's wait
(uniform over the 30 s for the baseline, so its figures are those of a reboot landing anywhere in a wait).
Usage: python bench/reboot_wake.py [--runs 20] [--baseline-runs 5] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/reboot_wake.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench._machine import describe
from remediator.adapters.kube import KubeAdapter
from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.worker import Worker
from remediator.settings import Settings
from tests.engine.conftest import fast_drain, passing_gates
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


async def until(check: Any, timeout: float) -> Any:
    async with asyncio.timeout(timeout):
        while True:
            got = await check()
            if got:
                return got
            await asyncio.sleep(0.005)


async def one_mode(wake: bool, runs: int, workdir: Path) -> list[float]:
    """Seconds from the reboot's status write to gate:validate begun, one per run."""
    rng = random.Random(7)
    async with FakeKube() as fake:
        kube = KubeAdapter.for_host(fake.url, qps=1000.0)
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{workdir / f'wake-{wake}.db'}", worker_poll_interval=0.05,  # type: ignore[arg-type]
            reboot_watch_wake=wake, max_quarantined_nodes="100%",  # type: ignore[arg-type]
        )
        rt, engine = await build_runtime(settings, kube=kube)
        fast_drain(rt)
        passing_gates(rt)
        for i in range(runs):
            fake.add_node(f"gpu-{i}", labels={"nvidia.com/gpu.present": "true"})
        worker = Worker(rt)
        app = create_app(settings, runtime=rt, run_worker=False)
        app.state.worker = worker
        api = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
        await worker.start()
        took: list[float] = []
        try:
            for i in range(runs):
                node = f"gpu-{i}"
                labels = xid_labels(node, 79)
                assert (await api.post("/api/v1/alerts", json=am_payload(am_alert(labels)))).status_code == 200

                async def rem_of(node: str = node) -> dict[str, Any] | None:
                    listed = (await api.get(f"/api/v1/remediations?node={node}")).json()
                    return listed[0] if listed else None

                await until(lambda: _in(rem_of, "succeeded"), 60)
                resolved = am_payload(am_alert(labels, status="resolved"))
                assert (await api.post("/api/v1/alerts", json=resolved)).status_code == 200
                rem = await until(lambda: _waiting_for_boot(rem_of), 60)
                # The reboot lands at a random moment of the step's 30 s wait (the watch's latency does not depend
                # on it: there, a moment within the first second, to keep the run short).
                await asyncio.sleep(rng.uniform(0.0, 1.0 if wake else 30.0))
                before = datetime.now(UTC)
                fake.reboot_node(node)
                started = await until(lambda rem_id=rem["id"]: _gate_started(rt, rem_id), 90)
                took.append((started - before).total_seconds())
        finally:
            await worker.stop()
            await api.aclose()
            await engine.dispose()
            await kube.close()
    return took


async def _in(rem_of: Any, state: str) -> bool:
    rem = await rem_of()
    return bool(rem and rem["state"] == state)


async def _waiting_for_boot(rem_of: Any) -> dict[str, Any] | None:
    rem = await rem_of()
    waiting = rem and rem["state"] == "reverting" and "reboot" in (rem.get("state_reason") or "")
    return rem if waiting else None


async def _gate_started(rt: Any, rem_id: str) -> datetime | None:
    for row in await rt.repo.steps(rem_id):
        if row.name == "gate:validate" and row.started_at is not None:
            at: datetime = row.started_at
            return at if at.tzinfo else at.replace(tzinfo=UTC)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="runs with the watch wake-up")
    parser.add_argument("--baseline-runs", type=int, default=5, help="runs of the 30 s re-check baseline")
    parser.add_argument("--smoke", action="store_true", help="2 watch runs and 1 baseline run")
    args = parser.parse_args()
    runs, baseline = (2, 1) if args.smoke else (args.runs, args.baseline_runs)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        watch = asyncio.run(one_mode(True, runs, Path(tmp)))
        poll = asyncio.run(one_mode(False, baseline, Path(tmp)))
    print(f"# bench/reboot_wake.py on {describe().line()}, "
          f"{datetime.now(UTC):%Y-%m-%d}, {time.time() - started:.0f} s")
    print("| mode | runs | p50 s | p90 s | max s |")
    print("|---|---|---|---|---|")
    for name, values in (("watch", watch), ("poll (baseline)", poll)):
        print(f"| {name} | {len(values)} | {percentile(values, 50):.3f} | {percentile(values, 90):.3f} | "
              f"{max(values):.3f} |")


if __name__ == "__main__":
    main()
