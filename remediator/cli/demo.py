"""`remediator demo`: a first look at the controller without a cluster.

Starts the real controller plan-only on a temporary SQLite file with the bundled rules and playbooks, posts
the bundled sample alerts (`remediator/bundled/samples/*.json`: fatal Xid 79, application Xid 13,
double-bit ECC, a GPU at 91 C, an idle GPU) through the real HTTP webhook, waits for the worker to plan
them, and prints where to look: the web UI, each remediation, an approval page, and for each remediation
the CLI commands that reproduce and show it. The demo overrides one thing, and says so on screen: one rule
on top of the bundled definitions makes the fatal Xid's drain wait for a person (the shipped definitions
are left as they are). Nothing leaves the machine: no cluster, no Slack, no webhook.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import shutil
import signal
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TextIO

import httpx
import uvicorn
import yaml

from remediator.adapters.notifier import Message
from remediator.api.app import create_app
from remediator.domain.states import State
from remediator.engine.bootstrap import build_runtime
from remediator.engine.notifications import NotificationService
from remediator.engine.runtime import Runtime
from remediator.settings import BUNDLED_DIR, Settings
from remediator.tools.simulation import simulate_payload

__all__ = ["DEMO_RULE", "GATED_SAMPLE", "SAMPLES_DIR", "Override", "prepare_definitions", "run_demo"]

SAMPLES_DIR = BUNDLED_DIR / "samples"
GATED_SAMPLE = "xid-79-fatal.json"
DEMO_RULE = "demo-xid-79-needs-approval"
_DRAIN = re.compile(r"^(?P<indent>[ \t]+)action:[ \t]*drain[ \t]*$", re.MULTILINE)
_DEMO_RULE = {
    "name": DEMO_RULE,
    "match": ['alertname="GPUXidError"', 'xid="79"'],
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


@dataclass(frozen=True)
class Override:
    """What the demo changes on top of the shipped definitions, and why (printed on screen)."""

    rule: str
    shipped: str  # the playbook the shipped rules choose for the gated sample
    playbook: str  # the playbook the demo rule sends it to
    what: str

    def line(self) -> str:
        return (
            f"Demo override: rule {self.rule} sends Xid 79 ({GATED_SAMPLE}) to playbook {self.playbook} "
            f"({self.what}), so that this first look has an approval page to show; the shipped rules run "
            f"{self.shipped} without asking. Everything else runs the bundled rules and playbooks as shipped."
        )


def shipped_playbook(sample: str = GATED_SAMPLE) -> str:
    """The playbook the bundled rules choose for a bundled sample alert (as `remediator simulate` says)."""
    settings = Settings(
        database_url="sqlite+aiosqlite:///:memory:",
        rules_dir=BUNDLED_DIR / "rules",
        playbooks_dir=BUNDLED_DIR / "playbooks",
    )
    report = simulate_payload(settings, (SAMPLES_DIR / sample).read_text())
    return str(report["alerts"][0]["playbook"])


def prepare_definitions(workdir: Path) -> tuple[Path, Path, Override]:
    """Copy the bundled rules and playbooks, then add a rule sending the fatal Xid to a gated copy of the
    playbook the shipped rules choose for it: the same steps, with `approval: required` on its drain.

    The copy is made by text (YAML round trips would lose comments and YAML 1.1 would read `on:` as a
    boolean); if the playbook has no drain step or its shape ever changes, the demo rule asks for approval
    of the whole shipped playbook instead. Returns the directories and the override to announce.
    """
    rules = workdir / "rules"
    playbooks = workdir / "playbooks"
    shutil.copytree(BUNDLED_DIR / "rules", rules)
    shutil.copytree(BUNDLED_DIR / "playbooks", playbooks)
    shipped = shipped_playbook()
    gated_name = f"{shipped}-approval"
    rule: dict[str, object] = {**_DEMO_RULE, "playbook": gated_name}
    source = playbooks / f"{shipped}.yaml"
    text = source.read_text() if source.is_file() else ""
    name_line = re.compile(rf"^name:[ \t]*{re.escape(shipped)}[ \t]*$", re.MULTILINE)
    gated, drains = _DRAIN.subn(r"\g<0>\n\g<indent>approval: required", text, count=1)
    gated, names = name_line.subn(f"name: {gated_name}", gated, count=1)
    if drains and names:
        (playbooks / f"{gated_name}.yaml").write_text(gated)
        override = Override(DEMO_RULE, shipped, gated_name, f"the shipped {shipped} with approval on its drain step")
    else:
        rule.update(playbook=shipped, require_approval=True)
        override = Override(DEMO_RULE, shipped, shipped, "approval required before the shipped playbook starts")
    (rules / "demo-approval.yaml").write_text(yaml.safe_dump({"rules": [rule]}, sort_keys=False))
    return rules, playbooks, override


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


def _fingerprints(raw: bytes) -> list[str]:
    try:
        payload = json.loads(raw)
    except ValueError:
        return []
    alerts = payload.get("alerts") if isinstance(payload, dict) else None
    return [str(a["fingerprint"]) for a in alerts or [] if isinstance(a, dict) and a.get("fingerprint")]


async def _post_samples(base: str, token: str, out: TextIO) -> tuple[int, dict[str, Path]]:
    """Post every sample; returns how many were accepted and which sample file each alert came from."""
    posted = 0
    sources: dict[str, Path] = {}
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
        for sample in sorted(SAMPLES_DIR.glob("*.json")):
            raw = sample.read_bytes()
            response = await client.post("/api/v1/alerts", content=raw, headers={"Content-Type": "application/json"})
            out.write(f"  posted {sample.name}: HTTP {response.status_code}\n")
            posted += response.status_code == 200
            sources.update(dict.fromkeys(_fingerprints(raw), sample))
    return posted, sources


async def _report(
    rt: Runtime, base: str, links: LinkCollector, out: TextIO, sources: dict[str, Path], override: Override,
    token: str,
) -> None:
    out.write("\nRemediations (plan-only: each step is planned and recorded, nothing is changed):\n")
    remediations = list(reversed(await rt.repo.list_remediations(limit=100)))
    for rem in remediations:
        where = rem.node or rem.target_key
        out.write(f"  {rem.state:<18} {rem.playbook:<26} {where:<18} {base}/remediations/{rem.id}\n")
    for rem_id, link in links.links.items():
        waiting = await rt.repo.get(rem_id)
        if waiting is not None and waiting.state == State.AWAITING_APPROVAL:
            out.write(f"\nApproval page ({waiting.playbook} on {waiting.node}): {link}\n")
    out.write("\nReproduce each one with the CLI (simulate plans a sample alert with no server and no database; "
              "describe shows the remediation while this demo runs and needs the demo's token):\n")
    out.write(f"  export REMEDIATOR_TOKEN={token}\n")
    for rem in remediations:
        out.write(f"  {rem.playbook} on {rem.node or rem.target_key}:\n")
        sample = sources.get(rem.alert_fingerprint)
        if sample is not None:
            note = (
                f"  # the shipped rules plan {override.shipped}; the demo override sent it to {rem.playbook}"
                if rem.rule == override.rule
                else ""
            )
            out.write(f"    remediator simulate {sample}{note}\n")
        out.write(f"    remediator describe {rem.id} --server {base}\n")
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
    # SIGTERM ends the demo as Ctrl-C does, the temporary folder removed: uvicorn catches it while serving and,
    # once stopped, raises it again with the handler found at its start; with the default one there the process
    # died before the folder was removed, with this one (it ignores the repeat) run_demo returns and cleans up.
    main = threading.current_thread() is threading.main_thread()  # only the main thread may set handlers
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        return await _run_demo(host=host, port=port, exit_after_posting=exit_after_posting, out=out, workdir=workdir)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def _terminated(_signum: int, _frame: object) -> None:
    """The SIGTERM uvicorn raises again once it has stopped serving: already acted on."""


async def _run_demo(
    *, host: str, port: int, exit_after_posting: bool, out: TextIO, workdir: Path | None
) -> int:
    with tempfile.TemporaryDirectory(prefix="remediator-demo-") as tmp:
        base_dir = workdir or Path(tmp)
        base_dir.mkdir(parents=True, exist_ok=True)
        # a thread: the simulation behind it runs its own event loop
        rules, playbooks, override = await asyncio.to_thread(
            prepare_definitions, base_dir / f"defs-{secrets.token_hex(3)}"
        )
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
                f"Rules and playbooks: the bundled ones ({BUNDLED_DIR / 'rules'}, {BUNDLED_DIR / 'playbooks'})\n"
                f"{override.line()}\n"
            )
            posted, sources = await _post_samples(base, token, out)
            await _settled(rt, 30.0)
            await rt.notifier.flush(5.0)
            await _report(rt, base, links, out, sources, override, token)
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
