"""`remediator bundle ID` and the API half of `remediator audit export`: the incident record of one remediation
through a running controller's API (the same server, token and deadline as the other operator commands).

`bundle` asks for the whole record (GET /api/v1/remediations/{id}/record) and packs it with
remediator/store/incident_archive.py, the packer GET .../bundle uses too, so both archives hold the same files.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from remediator.adapters.controller_api import ControllerApi
from remediator.cli.operator import EXIT_USAGE, IdArg, ServerOpt, _fail, _session
from remediator.domain.json_values import JsonObject
from remediator.store.incident_archive import archive_name, audit_line, pack

__all__ = ["bundle", "export_audit"]


def bundle(
    rem_id: IdArg,
    out: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="archive to write (default remediation-<id>.tar.gz here; - for stdout)"),
    ] = None,
    server: ServerOpt = None,
) -> None:
    """Write one remediation's incident record as a tar.gz for a postmortem: remediation, timeline, steps, agent
    readings, approvals, alert payloads, node and pods, audit rows with the chain segment that verifies them,
    definitions version, a README and a manifest of SHA-256 sums (the archive GET .../bundle serves)."""
    with _session(server) as session:
        full = session.resolve(rem_id)
        record = session.get(ControllerApi.path("remediations", full, "record"))
    data = pack(record)
    if out is not None and str(out) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    target = out or Path(archive_name(full))
    try:
        with target.open("xb") as file:  # never over an existing file
            file.write(data)
    except FileExistsError:
        _fail(EXIT_USAGE, f"{target} exists; remove it or name another with -o")
    except OSError as exc:
        _fail(EXIT_USAGE, f"cannot write {target}: {exc.strerror or exc}")
    typer.echo(f"wrote {target} ({len(data)} bytes): incident record of remediation {full}")


_PAGE = 10000  # audit rows asked for per request


def export_audit(
    server: str | None, *, since: datetime | None, until: datetime | None, node: str | None,
    remediation: str | None, write: Callable[[str], None],
) -> int:
    """`remediator audit export --server`: the audit rows through the controller's API, page by page, one JSON line
    each with its timestamp in ISO 8601 with `+00:00`. Returns how many were written."""
    params: JsonObject = {
        "since": since.isoformat() if since else None, "until": until.isoformat() if until else None,
        "node": node, "remediation": remediation, "limit": _PAGE,
    }
    after, count = 0, 0
    with _session(server) as session:
        while True:
            rows = session.get(ControllerApi.path("audit"), {**params, "after": after})
            for row in rows:
                write(audit_line(row))
            count += len(rows)
            if len(rows) < _PAGE:
                return count
            after = int(rows[-1]["id"])
