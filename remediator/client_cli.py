"""Operator commands against a running controller: `get`, `describe`, `approve|reject`, `revert|cancel|release`,
`pause|resume`. They talk to its JSON API only (never to the database), so they work from a laptop.

Where to connect: `--server`, else REMEDIATOR_SERVER, else `server:` in the config file
(REMEDIATOR_CONFIG_FILE, default ~/.config/remediator/config.yaml), else http://127.0.0.1:8080. The bearer
token: REMEDIATOR_TOKEN, else `token:` in the config file (one of the controller's REMEDIATOR_WEBHOOK_TOKEN).

Exit codes, for scripts: 0 done; 1 the controller said no (4xx: 409 conflict, 403, 401, 410...);
2 usage error (bad option, ambiguous ID prefix, unreadable config); 3 not found (404);
4 the controller cannot be reached or failed (5xx).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml

from remediator.adapters.controller_api import ControllerApi, ControllerApiError
from remediator.client_output import describe_remediation, dump, render

__all__ = [
    "EXIT_API_REFUSED",
    "EXIT_NOT_FOUND",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Connection",
    "register",
    "resolve_connection",
]

EXIT_API_REFUSED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4

DEFAULT_SERVER = "http://127.0.0.1:8080"
FULL_ID_LENGTH = 36
_PREFIX = re.compile(r"^[0-9a-fA-F-]{1,35}$")
_ALIASES = {
    "remediations": "remediations", "remediation": "remediations", "rem": "remediations", "rems": "remediations",
    "approvals": "approvals", "approval": "approvals",
    "alerts": "alerts", "alert": "alerts",
}


class TableOutput(StrEnum):
    wide = "wide"
    json = "json"
    yaml = "yaml"


class DataOutput(StrEnum):
    json = "json"
    yaml = "yaml"


@dataclass(frozen=True)
class Connection:
    server: str
    token: str | None


def _fail(code: int, message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def config_path() -> Path:
    explicit = os.environ.get("REMEDIATOR_CONFIG_FILE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "remediator" / "config.yaml"


def _config(path: Path) -> dict[str, Any]:
    if not path.exists():
        if os.environ.get("REMEDIATOR_CONFIG_FILE"):
            _fail(EXIT_USAGE, f"config file {path} (REMEDIATOR_CONFIG_FILE) does not exist")
        return {}
    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        _fail(EXIT_USAGE, f"config file {path}: {exc}")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        _fail(EXIT_USAGE, f"config file {path}: expected a mapping with `server` and `token`")
    return loaded


def resolve_connection(server: str | None) -> Connection:
    """Server and token from the option, the environment and the config file, in that order."""
    config = _config(config_path())
    url = server or os.environ.get("REMEDIATOR_SERVER") or config.get("server") or DEFAULT_SERVER
    token = os.environ.get("REMEDIATOR_TOKEN") or config.get("token")
    url = str(url).strip()
    if not url.startswith(("http://", "https://")):
        _fail(EXIT_USAGE, f"--server {url!r}: an http:// or https:// URL")
    return Connection(url, str(token).strip() if token else None)


def exit_code(error: ControllerApiError) -> int:
    if error.status is None or error.status >= 500:
        return EXIT_UNREACHABLE
    if error.status == 404:
        return EXIT_NOT_FOUND
    return EXIT_API_REFUSED


class _Session:
    """One command's connection: API errors become one stderr line and the documented exit code."""

    def __init__(self, server: str | None) -> None:
        self.api = ControllerApi(**vars(resolve_connection(server)))

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        try:
            return self.api.get(path, params)
        except ControllerApiError as exc:
            _fail(exit_code(exc), _say(exc))

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            return self.api.post(path, body)
        except ControllerApiError as exc:
            _fail(exit_code(exc), _say(exc))

    def resolve(self, given: str) -> str:
        """A full remediation ID from a unique prefix (as `get` shows it); a full ID is taken as it is."""
        given = given.strip()
        if len(given) >= FULL_ID_LENGTH or not _PREFIX.match(given):
            return given
        found = self.get(ControllerApi.path("remediations"), {"id_prefix": given, "limit": 10})
        ids = [str(r["id"]) for r in found]
        if not ids:
            _fail(EXIT_NOT_FOUND, f"no remediation with an ID starting {given!r}")
        if len(ids) > 1:
            _fail(EXIT_USAGE, f"ID prefix {given!r} is ambiguous: {', '.join(ids)}")
        return ids[0]


def _say(error: ControllerApiError) -> str:
    if error.status is None:
        return error.message
    hint = ""
    if error.status == 401:
        hint = " (set REMEDIATOR_TOKEN or `token:` in the config file)"
    return f"{error.status}: {error.message}{hint}"



@contextmanager
def _session(server: str | None) -> Iterator[_Session]:
    session = _Session(server)
    try:
        yield session
    finally:
        session.api.close()


def _complete_ids(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of remediation IDs (best effort: a quick query, nothing on any error)."""
    if incomplete and not _PREFIX.match(incomplete):
        return []
    state = {"approve": "awaiting_approval", "reject": "awaiting_approval", "release": "held"}.get(
        ctx.info_name or ""
    )
    try:
        conn = resolve_connection(ctx.params.get("server"))
        with ControllerApi(conn.server, conn.token, timeout=2.0) as api:
            rows = api.get(ControllerApi.path("remediations"),
                           {"id_prefix": incomplete or None, "state": state, "limit": 50})
    except (ControllerApiError, typer.Exit):
        return []
    return [(str(r["id"]), f"{r.get('state')} {r.get('playbook')} {r.get('target')}") for r in rows]


def _complete_resources(incomplete: str) -> list[str]:
    return [r for r in ("remediations", "approvals", "alerts") if r.startswith(incomplete)]


ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", "-s", envvar="REMEDIATOR_SERVER", show_envvar=True,
        help="controller URL (default: `server:` in the config file, else http://127.0.0.1:8080)",
    ),
]
IdArg = Annotated[
    str, typer.Argument(help="remediation ID or a unique prefix of it", autocompletion=_complete_ids)
]
DataOpt = Annotated[DataOutput | None, typer.Option("--output", "-o", help="print the answer as json or yaml")]


def _print_outcome(rem: dict[str, Any], done: str, output: DataOutput | None) -> None:
    if output is not None:
        typer.echo(dump(rem, output.value))
        return
    reason = f" ({rem['state_reason']})" if rem.get("state_reason") else ""
    typer.echo(f"remediation {rem.get('id')} {done}: now {rem.get('state')}{reason}")


def get(
    resource: Annotated[
        str, typer.Argument(help="remediations, approvals or alerts", autocompletion=_complete_resources)
    ],
    output: Annotated[TableOutput | None, typer.Option("--output", "-o", help="wide, json or yaml")] = None,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            help="remediations: a state (running, awaiting_approval, ...); approvals: pending, approved, rejected, "
            "expired, superseded; alerts: firing, resolved, or new (not processed yet), done",
        ),
    ] = None,
    node: Annotated[str | None, typer.Option("--node", help="only this node")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="at most this many, newest first")] = 100,
    server: ServerOpt = None,
) -> None:
    """List remediations, approval requests or stored alerts, newest first."""
    kind = _ALIASES.get(resource.lower())
    if kind is None:
        raise typer.BadParameter(f"{resource!r}: one of remediations, approvals, alerts", param_hint="RESOURCE")
    params: dict[str, Any] = {"node": node, "limit": limit}
    if kind == "remediations":
        params["state"] = state
    elif kind == "approvals":
        params["status"] = state
    elif state in ("new", "done"):
        params["state"] = state
    else:
        params["status"] = state
    with _session(server) as session:
        rows = session.get(ControllerApi.path(kind), params)
    typer.echo(render(kind, rows, output.value if output else "", datetime.now(UTC)))


def describe(rem_id: IdArg, server: ServerOpt = None) -> None:
    """Show one remediation: state, target, alert labels, steps, escalation, approvals and its audit events."""
    with _session(server) as session:
        full = session.resolve(rem_id)
        rem = session.get(ControllerApi.path("remediations", full))
        events = session.get(ControllerApi.path("audit"), {"remediation": full, "limit": 10000})
        approvals = session.get(ControllerApi.path("approvals"), {"remediation": full, "limit": 1000})
    typer.echo(describe_remediation(rem, events, approvals, datetime.now(UTC)))


def _decide(decision: str, rem_id: str, comment: str | None, by: str | None, server: str | None,
            output: DataOutput | None) -> None:
    body = {k: v for k, v in (("comment", comment), ("by", by)) if v}
    with _session(server) as session:
        full = session.resolve(rem_id)
        rem = session.post(ControllerApi.path("remediations", full, decision), body or None)
    _print_outcome(rem, "approved" if decision == "approve" else "rejected", output)


CommentOpt = Annotated[str | None, typer.Option("--comment", "-m", help="why (kept with the decision)")]
ByOpt = Annotated[
    str | None,
    typer.Option("--by", envvar="REMEDIATOR_USER", help="who decides (needed when REMEDIATOR_APPROVERS is set)"),
]


def approve(rem_id: IdArg, comment: CommentOpt = None, by: ByOpt = None, server: ServerOpt = None,
            output: DataOpt = None) -> None:
    """Approve the step a remediation is waiting on; it runs on."""
    _decide("approve", rem_id, comment, by, server, output)


def reject(rem_id: IdArg, comment: CommentOpt = None, by: ByOpt = None, server: ServerOpt = None,
           output: DataOpt = None) -> None:
    """Reject the step a remediation is waiting on; it ends in `rejected`."""
    _decide("reject", rem_id, comment, by, server, output)


def _move(verb: str, done: str, rem_id: str, server: str | None, output: DataOutput | None) -> None:
    with _session(server) as session:
        full = session.resolve(rem_id)
        rem = session.post(ControllerApi.path("remediations", full, verb))
    _print_outcome(rem, done, output)


def revert(rem_id: IdArg, server: ServerOpt = None, output: DataOpt = None) -> None:
    """Undo what a finished remediation did, step by step in reverse."""
    _move("revert", "revert requested", rem_id, server, output)


def cancel(rem_id: IdArg, server: ServerOpt = None, output: DataOpt = None) -> None:
    """Stop an open remediation where it is (nothing is undone)."""
    _move("cancel", "cancelled", rem_id, server, output)


def release(rem_id: IdArg, server: ServerOpt = None, output: DataOpt = None) -> None:
    """Let a held remediation past the flapping and repeat-offender holds (not the circuit breaker)."""
    _move("release", "released", rem_id, server, output)


def pause(server: ServerOpt = None) -> None:
    """Kill switch: start no new step anywhere until `resume`."""
    with _session(server) as session:
        session.post(ControllerApi.path("pause"))
    typer.echo("controller paused: no new steps start until `remediator resume`")


def resume(server: ServerOpt = None) -> None:
    """Lift the kill switch; held remediations are looked at again."""
    with _session(server) as session:
        session.post(ControllerApi.path("resume"))
    typer.echo("controller resumed")


def register(app: typer.Typer) -> None:
    """Add the operator commands to the `remediator` command line."""
    panel = "Against a running controller"
    for command in (get, describe, approve, reject, revert, cancel, release, pause, resume):
        app.command(rich_help_panel=panel)(command)
