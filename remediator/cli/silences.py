"""`remediator silence add|list|expire`: silences on a running controller, the way amtool makes them.

`add` takes matchers as amtool writes them (`alertname=GPUXidError`, `Hostname=~"gpu-node-1[0-9]"`,
`xid!=13`, `name!~re`; a bare first argument is the alert name), a duration (`--duration 2h`, default 1h) or
an end (`--end`), an optional start, a comment (required) and an author (`--author`/`--by`, else
REMEDIATOR_USER, else the controller records the authenticated caller). It prints the new silence's ID, as
amtool does. Like the other operator commands (cli/operator.py) it talks to the JSON API only, prints what the
controller sent through remediator.cli.terminal.printable, and exits 1 when the controller refuses (a 422 names
the field), 2 on a usage error, 3 for an unknown silence, 4 when the controller cannot be reached.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, NoReturn

import typer

from remediator.adapters.controller_api import ControllerApi
from remediator.cli.operator import EXIT_NOT_FOUND, EXIT_USAGE, ServerOpt, TableOutput, exit_code, resolve_connection
from remediator.cli.output import dump, render
from remediator.cli.terminal import printable
from remediator.domain.durations import parse_duration
from remediator.domain.json_values import JsonObject
from remediator.domain.silences import SilenceMatcher, parse_matchers
from remediator.errors import ControllerApiError

__all__ = ["silence_app"]

silence_app = typer.Typer(
    no_args_is_help=True,
    help="Silences on a running controller: alerts they match are recorded as silenced and start nothing.",
)


class SilenceState(StrEnum):
    active = "active"
    pending = "pending"
    expired = "expired"



def _fail(code: int, message: str) -> NoReturn:
    typer.echo(printable(f"error: {message}"), err=True)
    raise typer.Exit(code)


def _api(server: str | None) -> ControllerApi:
    return ControllerApi(**vars(resolve_connection(server)))


def _call(api: ControllerApi, method: str, path: str, *, params: JsonObject | None = None,
          body: JsonObject | None = None) -> Any:
    try:
        if method == "GET":
            return api.get(path, params)
        if method == "DELETE":
            return api.delete(path, params)
        return api.post(path, body)
    except ControllerApiError as exc:
        _fail(exit_code(exc), exc.message if exc.status is None else f"{exc.status}: {exc.message}")


def _time(value: str, option: str) -> datetime:
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        _fail(EXIT_USAGE, f"{option} {value!r}: an RFC 3339 time such as 2026-12-05T14:00:00Z")
    if when.tzinfo is None:
        _fail(EXIT_USAGE, f"{option} {value!r}: give the time zone (Z or +02:00)")
    return when.astimezone(UTC)


def _matchers(args: list[str]) -> list[SilenceMatcher]:
    try:
        found = parse_matchers(args)
    except ValueError as exc:
        _fail(EXIT_USAGE, f"matcher {exc}")
    if not found:
        _fail(EXIT_USAGE, "give at least one matcher, e.g. alertname=GPUXidError or Hostname=~\"gpu-node-1[0-9]\"")
    return found


@silence_app.command("add")
def add(
    matchers: Annotated[list[str], typer.Argument(
        help='matchers as amtool writes them: alertname=GPUXidError Hostname=~"gpu-node-1[0-9]" xid!=13',
        show_default=False,
    )],
    comment: Annotated[str, typer.Option("--comment", "-c", help="why (required; kept and audited)")],
    duration: Annotated[
        str | None, typer.Option("--duration", "-d", help="how long from the start (default 1h)")
    ] = None,
    end: Annotated[str | None, typer.Option("--end", help="when it ends (RFC 3339), instead of --duration")] = None,
    start: Annotated[str | None, typer.Option("--start", help="when it starts (RFC 3339; default now)")] = None,
    author: Annotated[str | None, typer.Option(
        "--author", "--by", "-a", envvar="REMEDIATOR_USER",
        help="the author recorded as createdBy (default: who the controller authenticates)",
    )] = None,
    output: Annotated[
        TableOutput | None, typer.Option("--output", "-o", help="json or yaml: the silence created")
    ] = None,
    server: ServerOpt = None,
) -> None:
    """Create a silence and print its ID."""
    parsed = _matchers(matchers)
    if not comment.strip():
        _fail(EXIT_USAGE, "--comment: say why (it is kept with the silence and audited)")
    if duration is not None and end is not None:
        _fail(EXIT_USAGE, "give --duration or --end, not both")
    begins = _time(start, "--start") if start else None
    if end is not None:
        ends = _time(end, "--end")
    else:
        try:
            length = parse_duration(duration or "1h")
        except ValueError as exc:
            _fail(EXIT_USAGE, f"--duration: {exc}")
        if length <= timedelta(0):
            _fail(EXIT_USAGE, f"--duration {duration!r}: longer than zero")
        ends = (begins or datetime.now(UTC)) + length
    body: JsonObject = {
        "matchers": [m.as_dict() for m in parsed], "endsAt": ends.isoformat(), "comment": comment,
    }
    if begins is not None:
        body["startsAt"] = begins.isoformat()
    if author:
        body["createdBy"] = author
    with _api(server) as api:
        created = _call(api, "POST", ControllerApi.path("silences"), body=body)
        silence_id = str(created.get("silenceID", "")) if isinstance(created, dict) else ""
        if output in (TableOutput.json, TableOutput.yaml):
            typer.echo(dump(_call(api, "GET", ControllerApi.path("silences", silence_id)), output.value))
            return
    typer.echo(printable(silence_id))


@silence_app.command("list")
def list_(
    state: Annotated[SilenceState | None, typer.Option("--state", help="only active, pending or expired")] = None,
    expired: Annotated[bool, typer.Option("--expired", "-e", help="expired ones too (default: active and pending)")]
    = False,
    output: Annotated[TableOutput | None, typer.Option("--output", "-o", help="wide, json or yaml")] = None,
    server: ServerOpt = None,
) -> None:
    """List silences, newest first: ID, matchers, state, start and end, author, comment."""
    with _api(server) as api:
        rows = _call(api, "GET", ControllerApi.path("silences"), params={"state": state.value if state else None})
    if state is None and not expired:
        rows = [r for r in rows if (r.get("status") or {}).get("state") != "expired"]
    shape = output.value if output else ""
    if shape in ("json", "yaml"):
        typer.echo(dump(rows, shape))
    else:
        typer.echo(render("silences", printable(rows), shape, datetime.now(UTC)))


@silence_app.command("expire")
def expire(
    silence_ids: Annotated[
        list[str], typer.Argument(help="silence IDs (or unique prefixes of them)", show_default=False)
    ],
    comment: Annotated[str | None, typer.Option("--comment", "-c", help="why (audited)")] = None,
    server: ServerOpt = None,
) -> None:
    """Expire silences now; they are kept, and alerts from now on are decided as usual."""
    with _api(server) as api:
        known: list[str] | None = None
        for given in silence_ids:
            full = given.strip()
            if len(full) < 36:
                if known is None:
                    known = [str(s["id"]) for s in _call(api, "GET", ControllerApi.path("silences"))]
                found = [k for k in known if k.startswith(full)] if full else []
                if not found:
                    _fail(EXIT_NOT_FOUND, f"no silence with an ID starting {given!r}")
                if len(found) > 1:
                    _fail(EXIT_USAGE, f"ID prefix {given!r} is ambiguous: {', '.join(found)}")
                full = found[0]
            done = _call(api, "DELETE", ControllerApi.path("silences", full), params={"comment": comment})
            typer.echo(printable(f"silence {done.get('id')} expired: now {(done.get('status') or {}).get('state')}"))
