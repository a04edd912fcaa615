"""Operator commands against a running controller: `get`, `describe`, `approve|reject`,
`revert|cancel|release|return`, `pause|resume`. Each move names its actor (`--by`, default $REMEDIATOR_USER)
and a reason (`--reason`, required to cancel, return and pause). They talk to its JSON API only (never to the
database), so they work from a laptop.

Where to connect: `--server`, else REMEDIATOR_SERVER, else `server:` in the config file
(REMEDIATOR_CONFIG_FILE, default ~/.config/remediator/config.yaml), else http://127.0.0.1:8080. The bearer
token: REMEDIATOR_TOKEN, else `token:` in the config file (one of the controller's REMEDIATOR_WEBHOOK_TOKEN);
a config file holding a token that its group or others can access draws a warning, the way ssh warns.
One deadline per command: REMEDIATOR_CLI_TIMEOUT seconds (default 10) for all of its requests together.

What the controller sends reaches the terminal one way: exact JSON/YAML (`-o json|yaml`), or text laid out
from the answer after every string in it went through remediator.cli.terminal.printable (`_show`); error and
warning lines go through `_stderr`. So no label, pod name or server message can drive the terminal.

Exit codes, for scripts: 0 done; 1 the controller said no (4xx: 409 conflict, 403, 401, 410...);
2 usage error (bad option, ambiguous ID prefix, unreadable config); 3 not found (404);
4 the controller cannot be reached or failed (5xx).
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
import yaml

from remediator.adapters.controller_api import DEFAULT_TIMEOUT_S, ControllerApi
from remediator.cli.output import describe_remediation, dump, render
from remediator.cli.terminal import printable
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import ControllerApiError
from remediator.kube.views import as_list, as_mapping

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
    timeout: float = DEFAULT_TIMEOUT_S


def _stderr(line: str) -> None:
    """Every error and warning line of the operator commands: it may quote the server or a label."""
    typer.echo(printable(line), err=True)


def _fail(code: int, message: str) -> NoReturn:
    _stderr(f"error: {message}")
    raise typer.Exit(code)


_T = TypeVar("_T")


def _show(answer: _T, output: str | None, text: Callable[[_T], str]) -> None:
    """The one way an answer of the controller reaches stdout: exact JSON/YAML, or `text` laid out from the answer
    with every string in it made terminal-safe first (so columns line up and no label adds a line)."""
    if output in ("json", "yaml"):
        typer.echo(dump(answer, output))
    else:
        typer.echo(text(printable(answer)))


def config_path() -> Path:
    explicit = os.environ.get("REMEDIATOR_CONFIG_FILE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "remediator" / "config.yaml"


def _config(path: Path, *, warn: bool = True) -> Mapping[str, object]:
    if not path.exists():
        if os.environ.get("REMEDIATOR_CONFIG_FILE"):
            _fail(EXIT_USAGE, f"config file {path} (REMEDIATOR_CONFIG_FILE) does not exist")
        return {}
    try:
        with path.open() as file:
            mode = os.fstat(file.fileno()).st_mode  # the file read, not whatever the path names a moment later
            loaded = yaml.safe_load(file)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        _fail(EXIT_USAGE, f"config file {path}: {exc}")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        _fail(EXIT_USAGE, f"config file {path}: expected a mapping with `server` and `token`")
    if warn and loaded.get("token") and os.name == "posix" and mode & 0o077:
        _stderr(
            f"warning: config file {path} holds a token but its permissions {stat.S_IMODE(mode):04o} let "
            f"group or others access it; run: chmod 600 {path}"
        )
    return loaded


def _timeout() -> float:
    given = os.environ.get("REMEDIATOR_CLI_TIMEOUT")
    if not given:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        _fail(EXIT_USAGE, f"REMEDIATOR_CLI_TIMEOUT={given!r}: seconds, a number above 0")
    return seconds


def resolve_connection(server: str | None, *, warn: bool = True) -> Connection:
    """Server and token from the option, the environment and the config file, in that order; the deadline.
    `warn`: say on stderr when the config file's token is open to others (not during shell completion)."""
    config = _config(config_path(), warn=warn)
    url = server or os.environ.get("REMEDIATOR_SERVER") or config.get("server") or DEFAULT_SERVER
    token = os.environ.get("REMEDIATOR_TOKEN") or config.get("token")
    url = str(url).strip()
    if not url.startswith(("http://", "https://")):
        _fail(EXIT_USAGE, f"--server {url!r}: an http:// or https:// URL")
    return Connection(url, str(token).strip() if token else None, _timeout())


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

    def get(self, path: str, params: JsonObject | None = None) -> Any:
        try:
            return self.api.get(path, params)
        except ControllerApiError as exc:
            _fail(exit_code(exc), _reason(exc))

    def post(self, path: str, body: JsonObject | None = None) -> Any:
        try:
            return self.api.post(path, body)
        except ControllerApiError as exc:
            _fail(exit_code(exc), _reason(exc))

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


def _reason(error: ControllerApiError) -> str:
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
        conn = resolve_connection(ctx.params.get("server"), warn=False)
        with ControllerApi(conn.server, conn.token, timeout=min(2.0, conn.timeout)) as api:
            rows = printable(api.get(ControllerApi.path("remediations"),
                                     {"id_prefix": incomplete or None, "state": state, "limit": 50}))
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


def _print_outcome(rem: Mapping[str, object], done: str, output: DataOutput | None) -> None:
    def line(safe: Mapping[str, object]) -> str:
        reason = f" ({safe['state_reason']})" if safe.get("state_reason") else ""
        return f"remediation {safe.get('id')} {done}: now {safe.get('state')}{reason}"

    _show(rem, output.value if output else None, line)


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
    """List remediations, approval requests, stored alerts or pauses, newest first (`get pauses --state all`:
    ended pauses too)."""
    shape = output.value if output else ""
    if resource.lower() in ("storms", "storm"):  # shared-cause storms (cli/storms.py); --state open: not closed
        from remediator.cli.storms import get_storms

        get_storms(shape, state, server)
        return
    if resource.lower() in ("pauses", "pause"):
        with _session(server) as session:
            rows = session.get(ControllerApi.path("pauses"), {"all": "true" if state == "all" else None})
        _show(rows, shape, _pauses_text)
        return
    kind = _ALIASES.get(resource.lower())
    if kind is None:
        raise typer.BadParameter(f"{resource!r}: one of remediations, approvals, alerts, pauses",
                                 param_hint="RESOURCE")
    params: JsonObject = {"node": node, "limit": limit}
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
    _show(rows, shape, lambda safe: render(kind, safe, shape, datetime.now(UTC)))


def describe(
    rem_id: IdArg, server: ServerOpt = None, output: DataOpt = None,
    storm_id: Annotated[str | None, typer.Argument(help="with `storm`: the storm's ID")] = None,
) -> None:
    """Show one remediation: state, target, alert labels, steps, escalation, approvals and its audit events.
    With -o json|yaml: the whole incident record (GET /api/v1/remediations/{id}/record), nothing cut.
    `describe storm ID`: a shared-cause storm's cause, candidates, nodes, timeline and decision."""
    if rem_id == "storm":
        from remediator.cli.storms import describe_storm

        if not storm_id:
            raise typer.BadParameter("describe storm ID: the storm's ID is missing", param_hint="ID")
        describe_storm(storm_id, server, output.value if output else None)
        return
    with _session(server) as session:
        full = session.resolve(rem_id)
        if output is not None:
            record = session.get(ControllerApi.path("remediations", full, "record"))
            _show(record, output.value, lambda _safe: "")
            return
        rem = session.get(ControllerApi.path("remediations", full))
        events = session.get(ControllerApi.path("audit"), {"remediation": full, "limit": 10000})
        approvals = session.get(ControllerApi.path("approvals"), {"remediation": full, "limit": 1000})
    _show({"remediation": rem, "events": events, "approvals": approvals}, None,
          lambda safe: describe_remediation(safe["remediation"], safe["events"], safe["approvals"], datetime.now(UTC)))


def _decide(decision: str, rem_id: str, comment: str | None, by: str | None, server: str | None,
            output: DataOutput | None) -> None:
    body: JsonObject = {k: v for k, v in (("comment", comment), ("by", by)) if v}
    with _session(server) as session:
        full = session.resolve(rem_id)
        rem = session.post(ControllerApi.path("remediations", full, decision), body or None)
    _print_outcome(rem, "approved" if decision == "approve" else "rejected", output)


CommentOpt = Annotated[
    str | None, typer.Option("--comment", "--reason", "-m", help="why (kept with the decision)")
]
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


ReasonOpt = Annotated[str | None, typer.Option("--reason", "-m", help="why (kept with the move)")]
ReasonReq = Annotated[str, typer.Option("--reason", "-m", help="why (required; kept with the move)")]
MoverOpt = Annotated[
    str | None, typer.Option("--by", envvar="REMEDIATOR_USER", help="who asks (recorded in the audit log)")
]


def _body(**fields: JsonValue) -> JsonObject | None:
    body: JsonObject = {k: v for k, v in fields.items() if v not in (None, "", [])}
    return body or None


def _move(verb: str, done: str, rem_id: str, server: str | None, output: DataOutput | None,
          body: JsonObject | None = None) -> None:
    with _session(server) as session:
        full = session.resolve(rem_id)
        rem = session.post(ControllerApi.path("remediations", full, verb), body)
    _print_outcome(rem, done, output)


def revert(rem_id: IdArg, reason: ReasonOpt = None, by: MoverOpt = None, server: ServerOpt = None,
           output: DataOpt = None) -> None:
    """Undo what a finished remediation did, step by step in reverse (its return gate first)."""
    _move("revert", "revert requested", rem_id, server, output, _body(reason=reason, by=by))


def cancel(rem_id: IdArg, reason: ReasonReq, by: MoverOpt = None, server: ServerOpt = None,
           output: DataOpt = None) -> None:
    """Stop an open remediation where it is (nothing is undone); its open approval requests are superseded."""
    _move("cancel", "cancelled", rem_id, server, output, _body(reason=reason, by=by))


def release(rem_id: IdArg, reason: ReasonOpt = None, by: MoverOpt = None, server: ServerOpt = None,
            output: DataOpt = None) -> None:
    """Let a held remediation past the flapping and repeat-offender holds (not the circuit breaker)."""
    _move("release", "released", rem_id, server, output, _body(reason=reason, by=by))


def return_(
    rem_id: IdArg,
    reason: ReasonReq,
    skip_reboot: Annotated[
        bool, typer.Option("--skip-reboot", help="do not wait for the node to run a new boot")
    ] = False,
    skip_validation: Annotated[
        bool, typer.Option("--skip-validation", help="do not run the GPU validation gate")
    ] = False,
    by: MoverOpt = None,
    server: ServerOpt = None,
    output: DataOpt = None,
) -> None:
    """Return a node or GPU to service now, whatever the remediation is doing: stop what remains, undo what
    holds it (taint, cordon, labels, condition, power limit) and end `returned`."""
    skip: list[JsonValue] = [name for name, on in (("reboot", skip_reboot), ("validation", skip_validation)) if on]
    _move("return", "return to service started", rem_id, server, output, _body(reason=reason, skip=skip, by=by))


def _pauses_text(rows: list[Mapping[str, object]]) -> str:
    if not rows:
        return "no pauses"
    lines = [f"{'ID':<36} {'BY':<20} {'SCOPE':<32} {'UNTIL':<26} REASON"]
    for row in rows:
        scope = as_mapping(row.get("scope"))
        parts = [*(["all"] if scope.get("all") else []), *(f"node={n}" for n in as_list(scope.get("nodes"))),
                 *([f"selector={scope['selector']}"] if scope.get("selector") else []),
                 *(f"playbook={p}" for p in as_list(scope.get("playbooks")))]
        until = row.get("until") or ("ended " + str(row["ended_at"]) if row.get("ended_at") else "resumed by hand")
        lines.append(f"{row.get('id')!s:<36} {row.get('created_by')!s:<20} {', '.join(parts):<32} "
                     f"{until:<26} {row.get('reason')}")
    return "\n".join(lines)


def pause(
    reason: ReasonReq,
    node: Annotated[list[str] | None, typer.Option("--node", help="only this node (repeatable)")] = None,
    selector: Annotated[str | None, typer.Option("--selector", help="only nodes with these labels (K=V,...)")] = None,
    playbook: Annotated[list[str] | None, typer.Option("--playbook", help="only this playbook (repeatable)")] = None,
    for_: Annotated[str | None, typer.Option("--for", help="ends by itself after this long (e.g. 2h)")] = None,
    until: Annotated[str | None, typer.Option("--until", help="ends by itself then (ISO 8601 with offset)")] = None,
    by: MoverOpt = None,
    server: ServerOpt = None,
) -> None:
    """Pause: no new step starts until `resume`. Without a scope or an end, the kill switch (everything, until
    resumed); with --node/--selector/--playbook and/or --for/--until, a pause of that scope (see `get pauses`)."""
    scoped = node or selector or playbook or for_ or until
    with _session(server) as session:
        if not scoped:
            session.post(ControllerApi.path("pause"), _body(reason=reason, by=by))
            typer.echo("controller paused: no new steps start until `remediator resume`")
            return
        made = session.post(ControllerApi.path("pauses"), _body(
            reason=reason, by=by, nodes=[*(node or [])], selector=selector, playbooks=[*(playbook or [])], until=until,
            **({"for": for_} if for_ else {})))
    typer.echo(f"pause {printable(str(made.get('id')))} holds {printable(_pauses_text([made]).splitlines()[1])}")


def resume(
    pause_id: Annotated[
        str | None, typer.Argument(help="the pause to end (`get pauses`); none: the kill switch")
    ] = None,
    reason: ReasonOpt = None, by: MoverOpt = None, server: ServerOpt = None,
) -> None:
    """End a pause by its ID, or lift the kill switch (and the pauses of scope all); held remediations are looked
    at again."""
    with _session(server) as session:
        if pause_id:
            session.post(ControllerApi.path("pauses", pause_id, "resume"), _body(reason=reason, by=by))
            typer.echo(f"pause {printable(pause_id)} ended")
            return
        session.post(ControllerApi.path("resume"), _body(reason=reason, by=by))
    typer.echo("controller resumed")


def register(app: typer.Typer) -> None:
    """Add the operator commands to the `remediator` command line."""
    panel = "Against a running controller"
    for command in (get, describe, approve, reject, revert, cancel, release, pause, resume):
        app.command(rich_help_panel=panel)(command)
    app.command("return", rich_help_panel=panel)(return_)
