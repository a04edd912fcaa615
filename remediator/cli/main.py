"""The one entry point: `remediator serve | sidecar | check | simulate | test | replay | report | audit | db | demo`,
and the operator commands against a running controller (`get | describe | approve | ...`, see cli/operator.py)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from remediator import __version__
from remediator.cli import incident as incident_cli
from remediator.cli import operator as client_cli
from remediator.cli.silences import silence_app
from remediator.cli.storms import storm_app
from remediator.cli.terminal import printable
from remediator.domain.durations import parse_duration
from remediator.domain.timestamps import as_utc
from remediator.errors import ConfigError, DefinitionError, DefinitionSetError, ScenarioError, StartupFailure
from remediator.process.logs import configure_logging
from remediator.settings import Settings, is_loopback, load_settings
from remediator.sidecar.settings import SidecarSettings
from remediator.store.incident_archive import verify_segment
from remediator.tools.storm_scenarios import load_scenario, render_scenarios, run_scenario

# A command imports what only it runs inside its function: the store (SQLAlchemy, Alembic), the API (FastAPI,
# uvicorn), the Kubernetes client, the definitions (CEL, Jinja) and the node agent (NVML, gRPC) take seconds to
# import, and `remediator --help`, `--version` and the operator commands (get, describe, approve, ...) need none
# of them. Everything imported above is light.

__all__ = ["app", "main"]

_R = TypeVar("_R")

app = typer.Typer(no_args_is_help=True, help="Alert-driven GPU remediation controller.")
audit_app = typer.Typer(no_args_is_help=True, help="Audit log: verify the hash chain, print its head, export it.")
db_app = typer.Typer(no_args_is_help=True, help="Database schema and retention.")
report_app = typer.Typer(no_args_is_help=True, help="Reports over the stored remediations.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"remediator {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_version, help="print the version and exit")
    ] = False,
) -> None:
    """Alert-driven GPU remediation controller."""
app.add_typer(audit_app, name="audit")
app.add_typer(db_app, name="db")
app.add_typer(report_app, name="report")
client_cli.register(app)
app.command(rich_help_panel="Against a running controller")(incident_cli.bundle)
app.add_typer(silence_app, name="silence", rich_help_panel="Against a running controller")
app.add_typer(storm_app, name="storm", rich_help_panel="Against a running controller")

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="YAML settings file (same keys as the env)")]


def _settings(config: Path | None, **overrides: object) -> Settings:
    try:
        return load_settings(config, **{k: v for k, v in overrides.items() if v is not None})
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def _duration(value: str, option: str) -> timedelta:
    """A positive duration from an option, or exit 2 naming the option."""
    try:
        parsed = parse_duration(value)
    except ValueError as exc:
        typer.echo(f"error: {option}: {exc}", err=True)
        raise typer.Exit(2) from exc
    if parsed <= timedelta(0):
        typer.echo(f"error: {option}: must be longer than 0: {value!r}", err=True)
        raise typer.Exit(2)
    return parsed


def _ladder(value: str) -> tuple[str, ...]:
    from remediator.engine.effectiveness import parse_ladder

    try:
        return parse_ladder(value)
    except ValueError as exc:
        typer.echo(f"error: --ladder: {exc}", err=True)
        raise typer.Exit(2) from exc


def _report(render: Callable[[_R], str], report: _R) -> None:
    """A report as text on stdout. Reports quote alerts (labels, node names, GPU IDs, from the database or a given
    payload), so every string in it is made terminal-safe before it is laid out (remediator.cli.terminal)."""
    typer.echo(render(printable(report)))


def _logging(level: str, fmt: str = "text") -> None:
    configure_logging(level, fmt)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to bind")] = 8080,
    config: ConfigOpt = None,
) -> None:
    """Run the controller: webhook receiver, API, UI and worker."""
    from remediator.engine.runtime import replica_id
    from remediator.engine.startup import (
        EXIT_CONFIG,
        EXIT_GUARD_LOST,
        EXIT_WORKER_LOST,
        prepare,
        resolve_worker_process,
    )

    settings = _settings(config)
    if not settings.webhook_token and not is_loopback(host):
        typer.echo(
            f"error: refusing to listen on {host} without REMEDIATOR_WEBHOOK_TOKEN: anyone who can reach it "
            "could trigger remediations. Set a token or bind 127.0.0.1.",
            err=True,
        )
        raise typer.Exit(2)
    if not (settings.audit_key or settings.audit_key_file) and not is_loopback(host):
        typer.echo(
            f"error: refusing to listen on {host} without REMEDIATOR_AUDIT_KEY or REMEDIATOR_AUDIT_KEY_FILE: "
            "without a key anyone who can write the database can rewrite the audit log undetected.",
            err=True,
        )
        raise typer.Exit(EXIT_CONFIG)
    settings = resolve_worker_process(settings.model_copy(update={"replica_id": replica_id(settings)}))
    _logging(settings.log_level, settings.log_format)  # before migrations: their INFO lines stay quiet
    try:
        guard = prepare(settings, str(settings.replica_id))
    except StartupFailure as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    if not settings.webhook_token:
        logging.getLogger("remediator").warning(
            "no REMEDIATOR_WEBHOOK_TOKEN set: accepting unauthenticated webhooks on loopback %s only", host
        )
    import uvicorn

    from remediator.api.app import create_app

    worker_lost: list[str] = []

    def stop_serving() -> None:
        server.should_exit = True  # a graceful stop, checked by the server's main loop

    def worker_exited(why: str) -> None:
        worker_lost.append(why)
        stop_serving()

    server = uvicorn.Server(uvicorn.Config(
        create_app(settings, listen_host=host, on_worker_exit=worker_exited), host=host, port=port,
        loop="uvloop", http="httptools", log_level="info", access_log=False,
        log_config=None,  # uvicorn's lines go through our handler
        proxy_headers=False,  # the peer address is the TCP peer: REMEDIATOR_TRUSTED_PROXIES is checked against it
    ))
    guard.on_lost = stop_serving
    server.run()
    if worker_lost:
        typer.echo(f"error: {worker_lost[0]}: stopped", err=True)
        raise typer.Exit(EXIT_WORKER_LOST)
    if not server.started and not guard.lost.is_set():
        raise typer.Exit(3)  # uvicorn's own start-up failure (e.g. the port is taken); it said why
    if guard.lost.is_set():
        typer.echo(f"error: lost the single-replica guard ({guard.description}): stopped", err=True)
        raise typer.Exit(EXIT_GUARD_LOST)


@app.command()
def sidecar(
    host: Annotated[str, typer.Option(help="address to bind")] = "0.0.0.0",
    port: Annotated[int | None, typer.Option(help="port (default REMEDIATOR_SIDECAR_PORT, 9410)")] = None,
) -> None:
    """Run the node agent (NVML power limits, GPU reset, GPU-to-pod mapping)."""
    from remediator.sidecar.app import serve as serve_sidecar

    settings = SidecarSettings()
    _logging("INFO")
    serve_sidecar(settings, host, port or settings.sidecar_port)


@app.command()
def check(
    paths: Annotated[list[Path] | None, typer.Argument(help="rule/playbook files or directories")] = None,
    config: ConfigOpt = None,
) -> None:
    """Validate rules, playbooks and the Xid catalog; print `file:line: message` per problem."""
    from remediator.actions.registry import default_registry
    from remediator.definitions import check_paths
    from remediator.engine.bootstrap import action_params

    settings = _settings(config)
    targets = list(paths) if paths else [settings.rules_dir, settings.playbooks_dir]
    warnings: list[DefinitionError] = []
    problems = check_paths(targets, action_params(default_registry()), warnings)
    for warning in warnings:  # deprecated spellings: reported, never failing the check
        where = f" ({warning.path})" if warning.path else ""
        typer.echo(f"{warning.file}:{warning.line}: warning: {warning.message}{where}")
    for problem in problems:
        typer.echo(problem.render())
    if problems:
        typer.echo(f"{len(problems)} problem(s) found", err=True)
        raise typer.Exit(1)
    typer.echo(f"ok: {', '.join(str(p) for p in targets)}")


@app.command()
def simulate(
    alert_file: Annotated[Path | None, typer.Argument(help="Alertmanager webhook payload (JSON)")] = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    scenario: Annotated[Path | None, typer.Option("--scenario", help="a storm scenario file (YAML, docs/storms.md)")
                        ] = None,
    seeds: Annotated[int, typer.Option("--seeds", min=1, max=10000, help="seeds to run the scenario with")] = 1,
) -> None:
    """Alertmanager payload in, plan out; or, with --scenario, the storm analysis over a simulated fleet. Touches
    no cluster and no database."""
    if scenario is not None:
        _simulate_scenario(scenario, seeds, as_json)
        return
    if alert_file is None:
        typer.echo("error: give an Alertmanager payload file, or --scenario FILE", err=True)
        raise typer.Exit(2)
    from remediator.tools.simulation import simulate_payload

    settings = _settings(config)
    try:
        report = simulate_payload(settings, alert_file.read_text())
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {alert_file}: {exc}", err=True)
        raise typer.Exit(2) from exc
    except DefinitionSetError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    from remediator.tools.simulation import render_text

    _report(render_text, report)


def _simulate_scenario(path: Path, seeds: int, as_json: bool) -> None:
    try:
        report = run_scenario(load_scenario(path), seeds)
    except (OSError, ScenarioError) as exc:
        typer.echo(f"error: {path}: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(json.dumps(report, indent=2) if as_json else render_scenarios(report))


@app.command("test")
def test_playbooks(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="test files or directories (default: the tests that go with the playbooks)"),
    ] = None,
    rules: Annotated[Path | None, typer.Option("--rules", help="rules directory (default: settings)")] = None,
    playbooks: Annotated[
        Path | None, typer.Option("--playbooks", help="playbooks directory (default: settings)")
    ] = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="list passing tests too")] = False,
    require_coverage: Annotated[
        bool, typer.Option("--require-coverage", help="fail when a playbook has no test")
    ] = False,
) -> None:
    """Run playbook tests plan-only (no cluster, no database); exit 1 with a diff on any mismatch."""
    from remediator.actions.registry import default_registry
    from remediator.engine.bootstrap import load_defs
    from remediator.tools.playbook_tests import default_test_paths, render_report, run_tests

    settings = _settings(config, rules_dir=rules, playbooks_dir=playbooks)
    actions = default_registry()
    try:
        defs = load_defs(settings, actions)
    except DefinitionSetError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    report = run_tests(list(paths) if paths else default_test_paths(settings), defs, settings, actions)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2, default=str))
    else:
        _report(lambda r: render_report(r, verbose=verbose), report)
    if not report.ok or (require_coverage and report.uncovered):
        raise typer.Exit(1)


@app.command()
def replay(
    since: Annotated[str, typer.Option("--since", help="how far back, e.g. 7d, 12h")] = "7d",
    rules: Annotated[Path | None, typer.Option("--rules", help="rules directory (default: settings)")] = None,
    playbooks: Annotated[
        Path | None, typer.Option("--playbooks", help="playbooks directory (default: settings)")
    ] = None,
    fail_on_diff: Annotated[
        bool, typer.Option("--fail-on-diff", help="exit 1 when any alert would be handled differently")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (for CI)")] = False,
    ladder: Annotated[
        str | None,
        typer.Option("--ladder", help="also re-play the remediations under this escalation ladder, e.g. "
                                      "reset-gpu,reboot-node,rma-gpu"),
    ] = None,
    window: Annotated[
        str, typer.Option("--window", help="recurrence window for --ladder: a fault this soon after a return climbs")
    ] = "24h",
    config: ConfigOpt = None,
) -> None:
    """Run stored alerts plan-only through the given definitions; show what would differ from history.

    With --ladder, also show how many runs each playbook had and would have had under that ladder.
    """
    from remediator.actions.registry import default_registry
    from remediator.engine.bootstrap import load_defs
    from remediator.engine.effectiveness import render_ladder_text
    from remediator.engine.idle_report import ladder_from_database
    from remediator.store.repository import utcnow
    from remediator.tools.replay import render_text, replay_database

    back = _duration(since, "--since")
    span = _duration(window, "--window")
    steps = _ladder(ladder) if ladder is not None else None
    settings = _settings(config, rules_dir=rules, playbooks_dir=playbooks)
    try:
        defs = load_defs(settings, default_registry())
    except DefinitionSetError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    start = utcnow() - back
    try:
        report = asyncio.run(replay_database(settings, defs, start))
        comparison = (
            asyncio.run(ladder_from_database(settings.database_url, steps, since=start, window=span))
            if steps else None
        )
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if as_json:
        document = report.as_dict()
        if comparison is not None:
            document["ladder"] = comparison.as_dict()
        typer.echo(json.dumps(document, indent=2, default=str))
    else:
        _report(render_text, report)
        if comparison is not None:
            typer.echo("")
            _report(render_ladder_text, comparison)
    if fail_on_diff and report.differences:
        raise typer.Exit(1)


@app.command()
def demo(
    host: Annotated[str, typer.Option(help="address to bind (loopback)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to bind; 0 picks a free one")] = 8080,
    exit_after_posting: Annotated[
        bool, typer.Option("--exit-after-posting", help="stop once the samples are planned (for scripts)")
    ] = False,
) -> None:
    """Plan-only controller on a temporary database, fed the bundled sample alerts; prints where to look."""
    from remediator.cli.demo import run_demo

    if not is_loopback(host):
        typer.echo(f"error: the demo binds loopback addresses only, not {host}", err=True)
        raise typer.Exit(2)
    _logging("WARNING")
    try:
        code = asyncio.run(
            run_demo(host=host, port=port, exit_after_posting=exit_after_posting, out=sys.stdout)
        )
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (run_demo turns it into this after cleaning up)
        code = 0
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            typer.echo(f"error: port {port} on {host} is already in use (another remediator serve or demo?): stop "
                       "it, or pick another port with --port N (--port 0 picks a free one)", err=True)
        else:
            typer.echo(f"error: cannot serve on {host}:{port}: {exc}", err=True)
        raise typer.Exit(2) from exc
    raise typer.Exit(code)


class OutputFormat(StrEnum):
    json = "json"
    table = "table"


@report_app.command("effectiveness")
def report_effectiveness(
    db: Annotated[
        str | None, typer.Option("--db", help="database URL (default REMEDIATOR_DATABASE_URL / --config)")
    ] = None,
    window: Annotated[
        str, typer.Option("--window", help="recurrence window: a fault this soon after a return is a recurrence")
    ] = "24h",
    since: Annotated[str, typer.Option("--since", help="remediations created in the last, e.g. 30d")] = "30d",
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="json or table")] = OutputFormat.table,
    ladder: Annotated[
        str | None,
        typer.Option("--ladder", help="also compare with this escalation ladder, e.g. reset-gpu,reboot-node,rma-gpu"),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """What each remediation achieved: healed, recurred, escalated or open, per playbook, Xid and GPU model."""
    from remediator.engine.effectiveness import render_ladder_text
    from remediator.engine.effectiveness import render_text as render_report
    from remediator.engine.idle_report import effectiveness_from_database
    from remediator.store.repository import utcnow

    span, back = _duration(window, "--window"), _duration(since, "--since")
    steps = _ladder(ladder) if ladder is not None else None
    url = db or _settings(config).database_url
    try:
        report, comparison = asyncio.run(
            effectiveness_from_database(url, since=utcnow() - back, window=span, ladder=steps)
        )
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if output is OutputFormat.json:
        document = report.as_dict()
        if comparison is not None:
            document["ladder"] = comparison.as_dict()
        typer.echo(json.dumps(document, indent=2, default=str))
        return
    _report(render_report, report)
    if comparison is not None:
        typer.echo("")
        _report(render_ladder_text, comparison)


def _audit_key(settings: Settings) -> bytes | None:
    try:
        return settings.audit_key_bytes()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


@audit_app.command("verify")
def audit_verify(
    config: ConfigOpt = None,
    anchor: Annotated[
        str | None,
        typer.Option("--anchor", help="SEQ:HASH from `remediator audit head` or the log, kept elsewhere"),
    ] = None,
    segment: Annotated[
        Path | None,
        typer.Option("--segment", help="check this file of consecutive audit rows (a bundle's audit-segment.jsonl, "
                     "or audit export output) instead of the database"),
    ] = None,
) -> None:
    """Walk the hash chain (HMAC under REMEDIATOR_AUDIT_KEY); exit 1 naming the first bad event.

    With --anchor, the event SEQ must still be there with that hash: catches deletion of the newest events.
    """
    from remediator.store.audit_tools import parse_anchor, verify

    settings = _settings(config)
    try:
        mark = parse_anchor(anchor) if anchor is not None else None
    except ValueError as exc:
        typer.echo(f"error: --anchor: {exc}", err=True)
        raise typer.Exit(2) from exc
    if segment is not None:
        try:
            lines = segment.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            typer.echo(f"error: --segment {segment}: {exc}", err=True)
            raise typer.Exit(2) from exc
        ok, message = verify_segment(lines, _audit_key(settings))
        typer.echo(message)
        if not ok:
            raise typer.Exit(1)
        return
    ok, message = asyncio.run(verify(settings.database_url, _audit_key(settings), mark))
    typer.echo(message)
    if not ok:
        raise typer.Exit(1)


@audit_app.command("head")
def audit_head(config: ConfigOpt = None) -> None:
    """Print SEQ:HASH of the newest audit event; keep it elsewhere and pass it to `verify --anchor`."""
    from remediator.store.audit_tools import head

    settings = _settings(config)
    found = asyncio.run(head(settings.database_url))
    if found is None:
        typer.echo("error: the audit log is empty", err=True)
        raise typer.Exit(1)
    typer.echo(found)


def _when(value: str | None, option: str) -> datetime | None:
    """--since/--until: an ISO 8601 time (no offset means UTC) or a duration meaning that long ago (24h, 7d)."""
    if value is None:
        return None
    text = value.strip()
    try:
        return datetime.now(UTC) - parse_duration(text)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        typer.echo(f"error: {option} {value!r}: an ISO 8601 time (2026-12-01T08:00:00+00:00) or a duration (24h)",
                   err=True)
        raise typer.Exit(2) from None
    return as_utc(at)


@audit_app.command("export")
def audit_export(
    config: ConfigOpt = None,
    since: Annotated[
        str | None, typer.Option("--since", help="from this time (ISO 8601) or this long ago (24h)")
    ] = None,
    until: Annotated[str | None, typer.Option("--until", help="before this time (ISO 8601) or this long ago")] = None,
    node: Annotated[str | None, typer.Option("--node", help="events of remediations on this node")] = None,
    remediation: Annotated[
        str | None, typer.Option("--remediation", help="events of this remediation (ID or a unique prefix)")
    ] = None,
    server: Annotated[
        str | None,
        typer.Option("--server", "-s", help="read through this controller's API (REMEDIATOR_TOKEN) instead of "
                     "REMEDIATOR_DATABASE_URL"),
    ] = None,
) -> None:
    """Print audit events as JSON lines, oldest first, each timestamp in ISO 8601 with `+00:00`.

    Straight from the database (REMEDIATOR_DATABASE_URL), or through a running controller's API with --server
    (or REMEDIATOR_SERVER / `server:` in the client config file, as for `get`)."""
    start, end = _when(since, "--since"), _when(until, "--until")
    if start is not None and end is not None and end <= start:
        typer.echo("error: --until must be later than --since", err=True)
        raise typer.Exit(2)
    if server or os.environ.get("REMEDIATOR_SERVER"):
        incident_cli.export_audit(server, since=start, until=end, node=node, remediation=remediation,
                                  write=lambda line: typer.echo(line))
        return
    from remediator.store.audit_tools import export

    settings = _settings(config)
    try:
        asyncio.run(export(settings.database_url, sys.stdout, since=start, until=end, node=node,
                           remediation=remediation))
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None) -> None:
    """Apply schema migrations to REMEDIATOR_DATABASE_URL."""
    from remediator.store.db import upgrade_sync

    settings = _settings(config)
    upgrade_sync(settings.database_url)
    typer.echo("database schema is up to date")


@db_app.command("prune")
def db_prune(
    config: ConfigOpt = None,
    alerts_older_than: Annotated[
        str | None, typer.Option("--alerts-older-than", help="e.g. 30d (default REMEDIATOR_ALERT_RETENTION)")
    ] = None,
    audit_older_than: Annotated[
        str | None, typer.Option("--audit-older-than", help="e.g. 365d (default REMEDIATOR_AUDIT_RETENTION)")
    ] = None,
) -> None:
    """Delete processed alerts and audit events past retention; a signed checkpoint keeps the chain verifiable."""
    from remediator.store.audit_tools import prune_database
    from remediator.store.repository import utcnow

    settings = _settings(config)
    try:
        alerts = parse_duration(alerts_older_than) if alerts_older_than else settings.alert_retention
        audit = parse_duration(audit_older_than) if audit_older_than else settings.audit_retention
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if alerts is None and audit is None:
        typer.echo("error: nothing to prune: set REMEDIATOR_ALERT_RETENTION / REMEDIATOR_AUDIT_RETENTION or "
                   "pass --alerts-older-than / --audit-older-than", err=True)
        raise typer.Exit(2)
    now = utcnow()
    report = asyncio.run(prune_database(
        settings.database_url, _audit_key(settings), audit_before=now - audit if audit else None,
        alerts_before=now - alerts if alerts else None,
    ))
    cut = f"; chain now starts after checkpoint {report.checkpoint.seq}" if report.checkpoint else ""
    typer.echo(f"deleted {report.alerts} alert(s), {report.batches} webhook batch(es), "
               f"{report.audit_events} audit event(s){cut}")


def main() -> None:
    app(prog_name="remediator")  # also under `python -m`: completion and help name the installed command


if __name__ == "__main__":
    main()
