"""`remediator demo`: a first look at the controller without a cluster.

Starts the real controller plan-only on a temporary SQLite file, posts the bundled sample alerts
(`remediator/bundled/samples/*.json`: fatal Xid 79, application Xid 13, double-bit ECC, a GPU at 91 C, an
idle GPU) through the real HTTP webhook, waits for the worker to plan them, and prints where to look: the
web UI, each remediation, and an approval page. The demo adds one rule on top of the bundled definitions
so the fatal Xid's drain waits for a person (the shipped definitions are left as they are). Nothing leaves
the machine: no cluster, no Slack, no webhook.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import httpx
import uvicorn
import yaml

from remediator.adapters.notifier import Message
from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.notifications import NotificationService
from remediator.engine.runtime import Runtime
from remediator.settings import BUNDLED_DIR, Settings

__all__ = ["DEMO_PLAYBOOK", "SAMPLES_DIR", "prepare_definitions", "run_demo"]

SAMPLES_DIR = BUNDLED_DIR / "samples"
DEMO_PLAYBOOK = "quarantine-node-approval"
_GATED_SOURCE = "quarantine-node"
_DRAIN = re.compile(r"^(?P<indent>[ \t]+)action:[ \t]*drain[ \t]*$", re.MULTILINE)
_NAME = re.compile(rf"^name:[ \t]*{_GATED_SOURCE}[ \t]*$", re.MULTILINE)
_DEMO_RULE = {
    "name": "demo-xid-79-needs-approval",
    "match": ['alertname="GPUXidError"', 'xid="79"'],
    "playbook": DEMO_PLAYBOOK,
    "kind": "xid",
    "priority": 1000,
}


@dataclass
class LinkCollector:
    """A notification channel that only remembers approval links, so the demo can print them."""

    name: str = "demo"
    links: dict[str, str] = field(default_factory=dict)

    async def send(self, message: Message) -> None:
        for button in message.buttons:
            if button.url and "/approvals/" in button.url and message.remediation_id:
                self.links[message.remediation_id] = button.url


def prepare_definitions(workdir: Path) -> tuple[Path, Path]:
    """Copy the bundled rules and playbooks, then add a playbook whose drain needs approval and its rule.

    The playbook is derived from the shipped quarantine playbook by text (YAML round trips would lose
    comments and YAML 1.1 would read `on:` as a boolean); if its shape ever changes, the demo rule asks for
    approval of the whole shipped playbook instead.
    """
    rules = workdir / "rules"
    playbooks = workdir / "playbooks"
    shutil.copytree(BUNDLED_DIR / "rules", rules)
    shutil.copytree(BUNDLED_DIR / "playbooks", playbooks)
    rule: dict[str, Any] = dict(_DEMO_RULE)
    text = (playbooks / f"{_GATED_SOURCE}.yaml").read_text()
    gated, drains = _DRAIN.subn(r"\g<0>\n\g<indent>approval: required", text, count=1)
    gated, names = _NAME.subn(f"name: {DEMO_PLAYBOOK}", gated, count=1)
    if drains and names:
        (playbooks / f"{DEMO_PLAYBOOK}.yaml").write_text(gated)
    else:
        rule.update(playbook=_GATED_SOURCE, require_approval=True)
    (rules / "demo-approval.yaml").write_text(yaml.safe_dump({"rules": [rule]}, sort_keys=False))
    return rules, playbooks


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def _settled(rt: Runtime, limit: float) -> None:
    """Wait until every posted alert is processed and no remediation is still moving."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(limit):
            while True:
                counts = await rt.repo.count_by_state()
                moving = sum(counts.get(s, 0) for s in ("pending", "running", "reverting"))
                if await rt.repo.pending_alert_count() == 0 and moving == 0:
                    return
                await asyncio.sleep(0.1)


async def _post_samples(base: str, token: str, out: TextIO) -> int:
    posted = 0
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
        for sample in sorted(SAMPLES_DIR.glob("*.json")):
            response = await client.post(
                "/api/v1/alerts", content=sample.read_bytes(), headers={"Content-Type": "application/json"}
            )
            out.write(f"  posted {sample.name}: HTTP {response.status_code}\n")
            posted += response.status_code == 200
    return posted


async def _report(rt: Runtime, base: str, links: LinkCollector, out: TextIO) -> None:
    out.write("\nRemediations (plan-only: each step is planned and recorded, nothing is changed):\n")
    for rem in reversed(await rt.repo.list_remediations(limit=100)):
        where = rem.node or rem.target_key
        out.write(f"  {rem.state:<18} {rem.playbook:<26} {where:<18} {base}/remediations/{rem.id}\n")
    for rem_id, link in links.links.items():
        waiting = await rt.repo.get(rem_id)
        if waiting is not None and waiting.state == "awaiting_approval":
            out.write(f"\nApproval page ({waiting.playbook} on {waiting.node}): {link}\n")
    out.write(f"\nWeb UI: {base}/\n")


async def run_demo(
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    exit_after_posting: bool = False,
    out: TextIO,
    workdir: Path | None = None,
) -> int:
    """Run the demo; returns a process exit code. Serves until cancelled unless `exit_after_posting`."""
    with tempfile.TemporaryDirectory(prefix="remediator-demo-") as tmp:
        base_dir = workdir or Path(tmp)
        base_dir.mkdir(parents=True, exist_ok=True)
        rules, playbooks = prepare_definitions(base_dir / f"defs-{secrets.token_hex(3)}")
        sock = _bind(host, port)
        bound = sock.getsockname()[1]
        shown_host = f"[{host}]" if ":" in host else host
        base = f"http://{shown_host}:{bound}"
        token = secrets.token_urlsafe(16)
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{base_dir / 'demo.db'}",
            rules_dir=rules,
            playbooks_dir=playbooks,
            dry_run=True,
            public_url=base,
            webhook_token=[token],
            secret_key=secrets.token_urlsafe(32),
            slack_webhook_url=None,
            notify_webhook_url=None,
            slack_signing_secret=None,
            approval_ttl=timedelta(hours=8),
            approver_header=None,
            approvers=[],
        )
        rt, engine = await build_runtime(settings, connect_kube=False)
        links = LinkCollector()
        if rt.notifier is not None:
            await rt.notifier.aclose()
        rt.notifier = NotificationService([links], rt.repo, rt.metrics, settings)
        server = uvicorn.Server(
            uvicorn.Config(create_app(settings, runtime=rt), log_level="warning", lifespan="on")
        )
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                if serving.done():
                    await serving
                    return 1
                await asyncio.sleep(0.05)
            out.write(
                f"gpu-remediator demo: plan-only controller on {base} (database {base_dir / 'demo.db'})\n"
            )
            posted = await _post_samples(base, token, out)
            await _settled(rt, 30.0)
            await rt.notifier.flush(5.0)
            await _report(rt, base, links, out)
            out.flush()
            if exit_after_posting:
                return 0 if posted else 1
            out.write("Serving until Ctrl-C.\n")
            out.flush()
            await serving
            return 0
        finally:
            server.should_exit = True
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await serving
            await rt.notifier.aclose()
            await engine.dispose()
            sock.close()
