"""bench/reads: the remediation list, the UI index and the audit listing over a large store, with a baseline.

Fills a fresh database with 100,000 remediations (plan and context JSON of realistic size, spread over
2,000 nodes and 180 days, most finished) and 1,000,000 audit events (ten per remediation) through bulk Core
inserts, then times requests through the real ASGI app (httpx's ASGI transport, in process, no network):
`GET /api/v1/remediations` unfiltered, by state, by node, by both and paginated deep; the UI index `/`; and
`GET /api/v1/audit?remediation=ID`. The garbage collector is set up as `remediator serve` sets it (start-up
objects frozen: `freeze_startup_objects`). Baseline: the same requests, in the same run, against the same app
on a database holding only the one remediation the audit request names (the audit endpoint answers 422 for
an ID no remediation has), so the figure that matters is what the stored rows add. `--explain` prints the query
plans of the statements behind those requests. SQLite by default; `--postgres` uses a database
created for the run on 127.0.0.1:5432 (trust auth, as the tests use), vacuumed after the fill as autovacuum
would, and dropped after it.
Usage: python bench/reads.py [--remediations 100000] [--events 1000000] [--requests 200] [--postgres]
       [--explain] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/reads.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench._machine import describe
from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.process.gc_freeze import freeze_startup_objects
from remediator.settings import Settings
from remediator.store.db import make_engine, upgrade
from remediator.store.models import AuditEvent, Remediation

NODES = 2000
# Share of finished and active states among stored remediations (a fleet where most work is long done).
STATE_MIX = (
    ("succeeded", 0.80), ("failed", 0.0775), ("cancelled", 0.03), ("reverted", 0.03), ("expired", 0.02),
    ("rejected", 0.02), ("held", 0.001), ("awaiting_approval", 0.0005), ("pending", 0.0005), ("running", 0.0005),
)
ACTIVE = {"pending", "held", "awaiting_approval", "running", "reverting"}
START = datetime(2026, 6, 1, tzinfo=UTC)
CHUNK = 5000


def node_name(i: int) -> str:
    return f"gpu-node-{i % NODES:04d}"


def state_of(i: int) -> str:
    """A deterministic state for row i following STATE_MIX."""
    x = (i * 7919 % 10000) / 10000
    for state, share in STATE_MIX:
        if x < share:
            return state
        x -= share
    return "succeeded"


def _plan(i: int) -> dict[str, Any]:
    steps = [
        {"name": name, "action": action, "params": params, "timeout": "10m", "on_failure": "revert"}
        for name, action, params in (
            ("cordon", "node.cordon", {"reason": "Xid 79: GPU fell off the bus"}),
            ("taint", "node.taint", {"key": "nvidia.com/gpu-unhealthy", "value": "xid79", "effect": "NoSchedule"}),
            ("drain", "node.drain", {"grace_period_seconds": 300, "timeout": "15m", "ignore_daemonsets": True,
                                     "delete_emptydir_data": True, "pod_selector": "nvidia.com/gpu.present=true"}),
            ("reset", "gpu.reset", {"gpu": "{{ alert.labels.gpu }}", "method": "nvidia-smi", "retries": 2}),
            ("verify", "gpu.health_check", {"checks": ["xid", "ecc", "pcie", "nvlink"], "wait": "2m"}),
            ("uncordon", "node.uncordon", {}),
        )
    ]
    return {
        "rule": {"name": "xid-79-fallen-off-bus", "match": {"alertname": "GPUXidError", "xid": "79"},
                 "playbook": "gpu-reset", "cooldown": "1h", "max_per_node_per_day": 2},
        "playbook": {"name": "gpu-reset", "version": f"v{i % 7}", "description": "Reset a GPU that reported a "
                     "fatal Xid after draining its workloads; revert uncordons and removes the taint.",
                     "steps": steps, "revert": [{"name": "untaint", "action": "node.untaint", "params": {}}]},
    }


def _context(i: int) -> dict[str, Any]:
    node = node_name(i)
    return {
        "node": {"name": node, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "topology.kubernetes.io"
                 "/zone": f"zone-{i % 3}", "node.kubernetes.io/instance-type": "p5.48xlarge"},
                 "unschedulable": False, "allocatable_gpus": 8},
        "pods": [
            {"namespace": f"team-{(i + k) % 40}", "name": f"train-{i % 997}-worker-{k}",
             "owner": {"kind": "Job", "name": f"train-{i % 997}"}, "gpus": 1, "phase": "Running"}
            for k in range(6)
        ],
        "gpu": {"uuid": f"GPU-{uuid.UUID(int=i).hex[:8]}-0000-4000-8000-{i:012d}", "index": str(i % 8),
                "xid_recent": [79], "ecc_volatile": 0},
    }


def remediation_rows(count: int) -> Iterator[dict[str, Any]]:
    plan, context = _plan(0), _context(0)  # content varies little; sizes are what matter to the reads
    for i in range(count):
        yield remediation_row(i, count, plan, context)


def remediation_row(i: int, count: int, plan: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """Row i of `count` (the same row for the same i and count)."""
    span = timedelta(days=180).total_seconds()
    state = state_of(i)
    created = START + timedelta(seconds=span * i / count)
    node = node_name(i)
    rem_id = str(uuid.UUID(int=(i + 1) * 0x9E3779B97F4A7C15 % (1 << 122) | (4 << 76) | (1 << 63)))
    labels = {"alertname": "GPUXidError", "Hostname": node, "gpu": str(i % 8), "xid": "79",
              "severity": "critical", "cluster": "prod-a", "namespace": "gpu-operator",
              "job": "dcgm-exporter", "instance": f"{node}:9400"}
    return {
        "id": rem_id, "created_at": created, "updated_at": created + timedelta(minutes=7),
        "finished_at": None if state in ACTIVE else created + timedelta(minutes=7), "state": state,
        "state_reason": "all steps succeeded" if state == "succeeded" else f"{state} by the controller",
        "rule": "xid-79-fallen-off-bus", "playbook": "gpu-reset", "definitions_version": f"{i % 50:012x}",
        "target_kind": "gpu", "target_key": f"{node}/gpu{i % 8}", "node": node,
        "gpu_uuid": context["gpu"]["uuid"], "gpu_index": str(i % 8), "namespace": None, "pod": None,
        "alert_id": i + 1, "alert_fingerprint": f"{i:016x}", "alertname": "GPUXidError",
        "alert_labels": labels, "alert_annotations": {"summary": f"Xid 79 on {node} GPU {i % 8}",
                                                      "description": "GPU has fallen off the bus."},
        "alert_resolved": state not in ACTIVE, "params": {"gpu": str(i % 8)}, "plan": plan, "context": context,
        "current_step": 6 if state == "succeeded" else 2,
        "active_key": f"{node}/gpu{i % 8}|gpu-reset|{i}" if state in ACTIVE else None,
        "quarantined": state in ("held", "running"), "linked_alerts": i % 3, "crashes": 0,
    }


def audit_rows(count: int, remediation_ids: list[str], created: list[datetime]) -> Iterator[dict[str, Any]]:
    kinds = ("alert.received", "remediation.created", "guardrail.checked", "state.running", "step.started",
             "step.succeeded", "step.started", "step.succeeded", "quarantine.started", "state.succeeded")
    per = max(1, count // max(1, len(remediation_ids)))
    for i in range(count):
        r = min(i // per, len(remediation_ids) - 1)
        kind = kinds[i % len(kinds)]
        yield {
            "id": i + 1, "ts": created[r] + timedelta(seconds=i % per * 40), "remediation_id": remediation_ids[r],
            "kind": kind, "actor": "controller",
            "data": {"step": i % 6, "step_name": "drain", "node": node_name(r), "detail": "evicted 6 pods"},
            "prev_hash": f"{i:064x}", "hash": f"{i + 1:064x}",
        }


def _chunks(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


async def fill(engine: AsyncEngine, remediations: int, events: int) -> tuple[list[str], float]:
    """Bulk-insert the rows (Core executemany in chunks); returns the remediation ids and seconds taken."""
    started = time.perf_counter()
    ids: list[str] = []
    created: list[datetime] = []
    for chunk in _chunks(remediation_rows(remediations)):
        ids += [r["id"] for r in chunk]
        created += [r["created_at"] for r in chunk]
        async with engine.begin() as conn:
            await conn.execute(insert(Remediation), chunk)
    for chunk in _chunks(audit_rows(events, ids, created)):
        async with engine.begin() as conn:
            await conn.execute(insert(AuditEvent), chunk)
    async with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            await conn.execute(text("SELECT setval(pg_get_serial_sequence('audit_events', 'id'), :n)"),
                               {"n": max(events, 1)})
        else:
            await conn.execute(text("ANALYZE"))
    if engine.dialect.name == "postgresql":
        # What autovacuum does soon after a bulk load: without the visibility map it sets, no index-only scan
        # is possible, and the count by state reads all 100,000 rows from the heap (~100 ms).
        async with engine.connect() as conn:
            await (await conn.execution_options(isolation_level="AUTOCOMMIT")).execute(text("VACUUM (ANALYZE)"))
    return ids, time.perf_counter() - started


async def seed_baseline(url: str, count: int) -> None:
    """The baseline store's one remediation: the row of the full store the audit request names (`requests_for`
    takes the middle ID), without its audit events."""
    if count == 0:
        return
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(Remediation), [remediation_row(count // 2, count, _plan(0), _context(0))])
    finally:
        await engine.dispose()


def requests_for(ids: list[str]) -> list[tuple[str, str]]:
    busy = node_name(17)
    sample = ids[len(ids) // 2] if ids else "00000000-0000-4000-8000-000000000000"
    return [
        ("list, newest 100", "/api/v1/remediations?limit=100"),
        ("list, state=failed", "/api/v1/remediations?state=failed&limit=100"),
        ("list, state=held (rare)", "/api/v1/remediations?state=held&limit=100"),
        ("list, node", f"/api/v1/remediations?node={busy}&limit=100"),
        ("list, state=succeeded & node", f"/api/v1/remediations?state=succeeded&node={busy}&limit=100"),
        ("list, state=succeeded, offset 5000", "/api/v1/remediations?state=succeeded&limit=100&offset=5000"),
        ("UI index /", "/"),
        ("UI index /?state=failed", "/?state=failed"),
        ("audit ?remediation=ID", f"/api/v1/audit?remediation={sample}"),
    ]


@asynccontextmanager
async def controller(url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(database_url=url, log_level="WARNING")
    rt, engine = await build_runtime(settings, connect_kube=False)
    app = create_app(settings, runtime=rt, run_worker=False)
    freeze_startup_objects()  # as `remediator serve` does once started (its app builds the runtime itself)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            yield client
    finally:
        await rt.intake.close()
        await rt.repo.close()
        await engine.dispose()


async def measure(url: str, ids: list[str], n: int) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    async with controller(url) as client:
        for label, path in requests_for(ids):
            for _ in range(max(2, n // 20)):  # warm-up
                (await client.get(path)).raise_for_status()
            samples = []
            for _ in range(n):
                started = time.perf_counter()
                r = await client.get(path)
                samples.append(time.perf_counter() - started)
                r.raise_for_status()
            samples.sort()
            out[label] = (statistics.median(samples) * 1000, samples[max(0, int(len(samples) * 0.99) - 1)] * 1000)
    return out


EXPLAINED = {
    "list by state": "SELECT id FROM remediations WHERE state = 'failed' ORDER BY created_at DESC, id LIMIT 100",
    "list by node": "SELECT id FROM remediations WHERE node = 'gpu-node-0017' ORDER BY created_at DESC, id LIMIT 100",
    "list by state and node": "SELECT id FROM remediations WHERE state = 'succeeded' AND node = 'gpu-node-0017' "
                              "ORDER BY created_at DESC, id LIMIT 100",
    "list, no filter": "SELECT id FROM remediations ORDER BY created_at DESC, id LIMIT 100",
    "count by state": "SELECT state, count(*) FROM remediations GROUP BY state",
    "quarantined nodes": "SELECT DISTINCT node FROM remediations WHERE quarantined = true AND node IS NOT NULL",
    "audit of one": "SELECT id FROM audit_events WHERE id > 0 AND remediation_id = 'x' ORDER BY id LIMIT 1000",
    "recent quarantine starts": "SELECT count(*) FROM audit_events WHERE kind = 'quarantine.started' "
                                "AND ts >= '2026-11-01'",
}


async def explain(engine: AsyncEngine) -> None:
    prefix = "EXPLAIN " if engine.dialect.name == "postgresql" else "EXPLAIN QUERY PLAN "
    async with engine.connect() as conn:
        for label, sql in EXPLAINED.items():
            rows = (await conn.execute(text(prefix + sql))).all()
            plan = " | ".join(str(r[-1]) for r in rows)
            print(f"- {label}: {plan}")


@asynccontextmanager
async def database(postgres: bool, work: Path, name: str) -> AsyncIterator[str]:
    if not postgres:
        yield f"sqlite+aiosqlite:///{work / f'{name}.db'}"
        return
    import asyncpg

    host, port, user = (os.environ.get("PGHOST", "127.0.0.1"), int(os.environ.get("PGPORT", "5432")),
                        os.environ.get("PGUSER", "postgres"))
    db = f"remediator_bench_{name}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(host=host, port=port, user=user, database=os.environ.get("PGDATABASE", "test"))
    try:
        await admin.execute(f'CREATE DATABASE "{db}"')
    finally:
        await admin.close()
    try:
        yield f"postgresql+asyncpg://{user}@{host}:{port}/{db}"
    finally:
        admin = await asyncpg.connect(host=host, port=port, user=user, database=os.environ.get("PGDATABASE", "test"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        finally:
            await admin.close()


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        async with database(args.postgres, work, "empty") as empty_url, \
                database(args.postgres, work, "full") as full_url:
            for url in (empty_url, full_url):
                await upgrade(url)
            engine = make_engine(full_url)
            try:
                ids, seconds = await fill(engine, args.remediations, args.events)
                print(f"filled {args.remediations} remediations and {args.events} audit events in {seconds:.1f} s"
                      + (f" ({(work / 'full.db').stat().st_size / 2**20:.0f} MiB)" if not args.postgres else ""))
                if args.explain:
                    print(f"query plans ({engine.dialect.name}):")
                    await explain(engine)
            finally:
                await engine.dispose()
            await seed_baseline(empty_url, args.remediations)
            baseline = await measure(empty_url, ids, args.requests)
            full = await measure(full_url, ids, args.requests)
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          f"{'PostgreSQL' if args.postgres else 'SQLite'}; {args.requests} sequential "
          "requests each through the ASGI app")
    print(f"| request | baseline (1 rem.) p50 / p99 ms | {args.remediations} rem., {args.events} events p50 / p99 ms |")
    print("|---|---|---|")
    for label in full:
        (b50, b99), (f50, f99) = baseline[label], full[label]
        print(f"| {label} | {b50:.1f} / {b99:.1f} | {f50:.1f} / {f99:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--remediations", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=200, help="timed requests per endpoint")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL at 127.0.0.1:5432 instead of SQLite")
    parser.add_argument("--explain", action="store_true", help="print the query plans of the measured reads")
    parser.add_argument("--smoke", action="store_true", help="a few thousand rows and 5 requests: runs in seconds")
    args = parser.parse_args()
    if args.smoke:
        args.remediations, args.events, args.requests = 2000, 20_000, 5
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
