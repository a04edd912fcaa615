"""`remediator get storms`, `remediator describe storm ID` and `remediator storm approve|reject ID`: shared-cause
storms on a running controller (engine/storm_guard.py, docs/storms.md), through its JSON API only, printed through
the same terminal-safe output as the other operator commands (cli/operator.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import typer

from remediator.adapters.controller_api import ControllerApi
from remediator.cli.operator import DataOpt, MoverOpt, ReasonOpt, ReasonReq, ServerOpt, _body, _session, _show
from remediator.kube.views import as_list, as_mapping

__all__ = ["describe_storm", "get_storms", "storm_app", "storms_text"]

storm_app = typer.Typer(no_args_is_help=True,
                        help="Shared-cause storms: one group decision for every remediation a storm holds.")


def storms_text(rows: list[Mapping[str, object]]) -> str:
    if not rows:
        return "no storms"
    lines = [f"{'ID':<36} {'STATE':<9} {'NODES':>5} {'OPENED':<26} CAUSE"]
    for row in rows:
        lines.append(f"{row.get('id')!s:<36} {row.get('state')!s:<9} {len(as_list(row.get('nodes'))):>5} "
                     f"{row.get('opened_at')!s:<26} {as_mapping(row.get('cause')).get('text')}")
    return "\n".join(lines)


def storm_text(storm: Mapping[str, object]) -> str:
    nodes = [str(n) for n in as_list(storm.get("nodes"))]
    lines = [f"storm {storm.get('id')}: {storm.get('state')}", f"cause: {as_mapping(storm.get('cause')).get('text')}",
             f"opened: {storm.get('opened_at')}  updated: {storm.get('updated_at')}",
             f"nodes ({len(nodes)}): {', '.join(nodes)}"]
    if storm.get("decided_by"):
        lines.append(f"decided: {storm.get('state')} by {storm.get('decided_by')} at {storm.get('decided_at')}"
                     f" ({storm.get('decision_reason') or 'no reason given'})")
    lines.append("candidates:")
    lines += [f"  {as_mapping(c).get('text')}" for c in as_list(as_mapping(storm.get("analysis")).get("candidates"))]
    lines.append("timeline:")
    for e in map(as_mapping, as_list(storm.get("timeline"))):
        added = [str(a) for a in as_list(e.get("added"))]
        lines.append(f"  {e.get('at')} {e.get('event')}" + (f" +{', '.join(added)}" if added else "")
                     + (f" by {e['by']}" if e.get("by") else ""))
    return "\n".join(lines)


def get_storms(shape: str, state: str | None, server: str | None) -> None:
    with _session(server) as session:
        rows = session.get(ControllerApi.path("storms"), {"all": "false" if state == "open" else None})
    _show(rows, shape, storms_text)


def describe_storm(storm_id: str, server: str | None, output: str | None) -> None:
    with _session(server) as session:
        storm = session.get(ControllerApi.path("storms", storm_id))
    _show(storm, output, storm_text)


@storm_app.command("approve")
def approve(storm_id: Annotated[str, typer.Argument(help="the storm (`get storms`)")], reason: ReasonOpt = None,
            by: MoverOpt = None, server: ServerOpt = None, output: DataOpt = None) -> None:
    """Approve the group: every remediation the storm holds goes on."""
    with _session(server) as session:
        storm = session.post(ControllerApi.path("storms", storm_id, "approve"), _body(reason=reason, by=by))
    _show(storm, output.value if output else None,
          lambda s: f"storm {s.get('id')} approved: {len(s.get('released') or [])} remediation(s) released")


@storm_app.command("reject")
def reject(storm_id: Annotated[str, typer.Argument(help="the storm (`get storms`)")], reason: ReasonReq,
           by: MoverOpt = None, server: ServerOpt = None, output: DataOpt = None) -> None:
    """Reject the group: every remediation the storm holds is cancelled."""
    with _session(server) as session:
        storm = session.post(ControllerApi.path("storms", storm_id, "reject"), _body(reason=reason, by=by))
    _show(storm, output.value if output else None,
          lambda s: f"storm {s.get('id')} rejected: {len(s.get('cancelled') or [])} remediation(s) cancelled")
