"""`remediator get storms`, `describe storm ID` and `storm approve|reject` against a controller served by uvicorn on
127.0.0.1 (the strict fake API server behind it): the storm's cause and nodes are listed and described, and one
`storm approve` releases every remediation it holds."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import uvicorn
from typer.testing import CliRunner, Result

from remediator.cli.main import app
from tests.engine.conftest import MakeCluster
from tests.storms.test_storm_hold import by_node, fault, storm_cluster


async def test_get_describe_and_approve_a_storm_from_the_cli(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster = await storm_cluster(make_cluster)
    await fault(cluster, "n00", "n01", "n02", "n03", "n04", "n10")
    asgi: Any = cluster.api._transport
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(asgi.app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    env = {"REMEDIATOR_SERVER": f"http://127.0.0.1:{sock.getsockname()[1]}", "XDG_CONFIG_HOME": str(tmp_path),
           "REMEDIATOR_USER": "oncall"}

    async def cli(*args: str) -> Result:
        return await asyncio.to_thread(lambda: CliRunner().invoke(app, list(args), env=env))

    try:
        async with asyncio.timeout(20):
            while not server.started:
                await asyncio.sleep(0.02)
        listed = await cli("get", "storms")
        assert listed.exit_code == 0, listed.output
        assert "open" in listed.output and "580.95.05" in listed.output
        (storm,) = json.loads((await cli("get", "storms", "-o", "json")).output)
        described = await cli("describe", "storm", storm["id"])
        assert described.exit_code == 0, described.output
        assert "5 of 6 faulting nodes carry label" in described.output and "n04" in described.output
        assert "opened" in described.output
        missing = await cli("describe", "storm")
        assert missing.exit_code != 0 and "storm's ID is missing" in missing.output
        approved = await cli("storm", "approve", storm["id"], "--reason", "known driver issue")
        assert approved.exit_code == 0, approved.output
        assert "5 remediation(s) released" in approved.output
    finally:
        server.should_exit = True
        await task
        sock.close()
    await cluster.settle()
    assert all(r["state"] != "held" for r in (await by_node(cluster)).values())
    storm_now = (await cluster.api.get(f"/api/v1/storms/{storm['id']}")).json()
    assert storm_now["decided_by"].endswith("oncall") and storm_now["decision_reason"] == "known driver issue"
