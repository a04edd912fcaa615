"""bench/decide: how fast one replica decides alerts, next to how fast it acknowledges them.

One webhook carries --alerts alerts (10,000 by default) for --nodes GPU nodes on the strict fake API server:
60 % Xid 79 (reboot-node: a remediation per node, the rest linked to it, most held by
MAX_QUARANTINED_NODES=20), 25 % Xid 13 (application class: notify-pods, with the repeated-Xid escalation
check per alert), 15 % an alert no rule matches. The controller is a real `remediator serve` process on SQLite
(REMEDIATOR_MAX_BODY_BYTES raised to take the webhook). Measured from the moment the webhook is sent:
acknowledged (the 200, every alert durably stored) and decided (no alert left in state `new`: each is
matched, linked, unmatched or held), reported as alerts per second, with the outcomes counted.
Usage: python bench/decide.py [--alerts 10000] [--nodes 2000] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/decide.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench._machine import describe
from tests.controller_process import ControllerProcess
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels

TOKEN = "decide-token"


def alerts(count: int, nodes: int) -> list[dict[str, Any]]:
    rng = random.Random(11)
    made = []
    for i in range(count):
        node = f"gpu-{rng.randrange(nodes):05d}"
        roll = rng.random()
        if roll < 0.60:
            labels = xid_labels(node, 79, gpu=str(i % 8), uuid=f"GPU-{i:012d}")
        elif roll < 0.85:
            labels = xid_labels(node, 13, gpu=str(i % 8), uuid=f"GPU-{i % 400:012d}", exported_pod=f"job-{i}")
        else:
            labels = {"alertname": "DiskAlmostFull", "node": node, "mountpoint": f"/data{i}"}
        made.append(am_alert(labels))
    return made


def counts(database: Path) -> tuple[int, Counter[str]]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as db:
        new = db.execute("SELECT count(*) FROM alerts WHERE state = 'new'").fetchone()[0]
        outcomes = Counter({str(o): n for o, n in db.execute(
            "SELECT outcome, count(*) FROM alerts WHERE state = 'done' GROUP BY outcome")})
    return int(new), outcomes


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with FakeKube() as fake:
        fake.add_namespace("ml")
        for i in range(args.nodes):
            fake.add_node(f"gpu-{i:05d}", ip=f"127.9.{i // 250}.{i % 250 + 1}",
                          labels={"nvidia.com/gpu.present": "true"})
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            database = work / "decide.db"
            env = {
                "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{database}", "REMEDIATOR_WEBHOOK_TOKEN": TOKEN,
                "REMEDIATOR_KUBECONFIG": str(write_kubeconfig(work / "kubeconfig", fake.url)),
                "REMEDIATOR_MAX_QUARANTINED_NODES": "20", "REMEDIATOR_KUBE_QPS": "500",
                "REMEDIATOR_MAX_BODY_BYTES": str(256 * 1024 * 1024), "REMEDIATOR_LOG_LEVEL": "WARNING",
                "REMEDIATOR_WORKER_PROCESS": "false",  # one process, as the recorded figures were measured
            }
            proc = ControllerProcess(work, env, name="decide")
            await proc.start(timeout=300)
            try:
                body = json.dumps(am_payload(*alerts(args.alerts, args.nodes))).encode()
                async with httpx.AsyncClient(timeout=600) as client:
                    started = time.perf_counter()
                    response = await client.post(
                        f"{proc.url}/api/v1/alerts", content=body,
                        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
                    )
                    acknowledged = time.perf_counter() - started
                    response.raise_for_status()
                while True:
                    left, outcomes = await asyncio.to_thread(counts, database)
                    if left == 0 and sum(outcomes.values()) >= args.alerts:
                        break
                    await asyncio.sleep(0.05)
                decided = time.perf_counter() - started
            finally:
                await proc.stop()
    return {"alerts": args.alerts, "body_mb": len(body) / 1e6, "ack_s": acknowledged, "decided_s": decided,
            "outcomes": dict(outcomes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alerts", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=2_000)
    parser.add_argument("--smoke", action="store_true", help="500 alerts on 100 nodes")
    args = parser.parse_args()
    if args.smoke:
        args.alerts, args.nodes = 500, 100
    r = asyncio.run(run(args))
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          f"one webhook of {r['alerts']} alerts ({r['body_mb']:.1f} MB), {args.nodes} nodes, "
          "SQLite, one replica")
    print("| measurement | seconds from send | alerts per second |")
    print("|---|---|---|")
    print(f"| acknowledged (200: every alert stored) | {r['ack_s']:.2f} | {r['alerts'] / r['ack_s']:.0f} |")
    print(f"| decided (none left `new`) | {r['decided_s']:.2f} | {r['alerts'] / r['decided_s']:.0f} |")
    print(f"| deciding alone (decided - acknowledged) | {r['decided_s'] - r['ack_s']:.2f} "
          f"| {r['alerts'] / max(1e-9, r['decided_s'] - r['ack_s']):.0f} |")
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items())))


if __name__ == "__main__":
    main()
