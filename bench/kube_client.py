"""bench/kube_client: what one Kubernetes read costs the controller, with the client's session trusting the
environment (the official client's default) and as the controller builds it (only when a proxy is named).

Both adapters read the same ReplicaSet from the strict fake API server over real HTTP, one at a time and 8
at once (an admission reads a node's owners together), in alternating rounds so that both see the same
machine. With `trust_env`, aiohttp looks up proxies and ~/.netrc for every request in worker threads.
Usage: python bench/kube_client.py [--reads 400] [--rounds 2] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/kube_client.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes.aio import client

from bench._machine import describe
from remediator.adapters.kube import KubeAdapter, with_session_options
from tests.fakekube.server import FakeKube


async def per_read_ms(kube: KubeAdapter, reads: int, together: int) -> float:
    started = time.perf_counter()
    for _ in range(reads // together):
        await asyncio.gather(*(kube.get_object("ReplicaSet", "ml", "trainer-1") for _ in range(together)))
    return (time.perf_counter() - started) / reads * 1000


async def main(args: argparse.Namespace) -> None:
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          f"load average {os.getloadavg()[0]:.1f}; {args.reads} reads a cell")
    print("| round | client session | one at a time, ms per read | 8 at once, ms per read |")
    print("|---|---|---|---|")
    async with FakeKube() as fake:
        fake.add_namespace("ml")
        fake.add_replicaset("trainer-1", "ml")
        for round_ in range(1, args.rounds + 1):
            for label, trusting in (("trust_env (client default)", True), ("as the controller builds it", False)):
                configuration = client.Configuration(host=fake.url)
                if trusting:
                    configuration.client_session_kwargs = {"trust_env": True}
                kube = KubeAdapter(client.ApiClient(with_session_options(configuration)), qps=1e6)
                try:
                    await per_read_ms(kube, 40, 1)  # connections and caches warm
                    cells = [await per_read_ms(kube, args.reads, n) for n in (1, 8)]
                finally:
                    await kube.close()
                print(f"| {round_} | {label} | {cells[0]:.2f} | {cells[1]:.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reads", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="40 reads, one round")
    parsed = parser.parse_args()
    if parsed.smoke:
        parsed.reads, parsed.rounds = 40, 1
    asyncio.run(main(parsed))
