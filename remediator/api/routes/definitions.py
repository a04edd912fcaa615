"""The definitions in force, their history by version, and reload on demand.

`GET /api/v1/definitions` shows the version in force and the outcome of the last reload (with every
problem as file:line when a set was refused); `GET /api/v1/definitions/{version}` returns the exact files
of that version, from memory or from the store (every version a remediation used is stored);
`POST /api/v1/definitions/reload` re-reads the files now. `GET /definitions` is the same status as a page.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import JsonValue

from remediator.api.deps import Auth, RuntimeDep
from remediator.api.signin import require_sign_in
from remediator.api.templating import page
from remediator.domain.json_values import JsonObject
from remediator.engine.reload import DefinitionsReloader
from remediator.engine.runtime import Runtime

__all__ = ["get_reloader", "router", "ui_router", "yaml_stream"]

router = APIRouter(prefix="/api/v1/definitions", dependencies=[Auth], tags=["definitions"])
ui_router = APIRouter(tags=["ui"], include_in_schema=False, dependencies=[Depends(require_sign_in)])

YAML_TYPE = "application/yaml; charset=utf-8"


def get_reloader(request: Request) -> DefinitionsReloader:
    """The app's reloader (started by the lifespan; made on first use when a test skips the lifespan)."""
    reloader: DefinitionsReloader | None = getattr(request.app.state, "reloader", None)
    if reloader is None:
        reloader = DefinitionsReloader(request.app.state.runtime)
        request.app.state.reloader = reloader
    return reloader


def yaml_stream(version: str, files: dict[str, str]) -> str:
    """All files of a version as one YAML stream, one document per file, each headed by its name."""
    parts = [f"# definitions version {version}\n"]
    for name in sorted(files):
        text = files[name]
        parts.append(f"---\n# file: {name}\n{text}{'' if text.endswith(chr(10)) else chr(10)}")
    return "".join(parts)


def status_of(rt: Runtime, reloader: DefinitionsReloader) -> JsonObject:
    holder = rt.definitions
    defs = holder.current
    last = holder.last_reload
    return {
        "version": defs.version,
        "loaded_at": holder.loaded_at[defs.version].isoformat(),
        "files": [*sorted(defs.sources)],
        "rules": [
            {"name": r.name, "playbook": r.playbook, "priority": r.priority, "enabled": r.enabled}
            for r in defs.rules
        ],
        "playbooks": [*sorted(defs.playbooks)],
        "directories": {"rules": str(rt.settings.rules_dir), "playbooks": str(rt.settings.playbooks_dir)},
        "watching": reloader.watching,
        "watch_interval_seconds": rt.settings.definitions_watch_interval.total_seconds(),
        "last_reload": last.as_dict() if last is not None else None,
        "last_reload_ok": last is None or last.ok,
        "in_memory": [*reversed(holder.history)],
    }


@router.get("")
async def definitions(request: Request, rt: RuntimeDep) -> dict[str, JsonValue]:
    body = status_of(rt, get_reloader(request))
    body["stored"] = [
        {"version": v, "stored_at": ts.isoformat()} for v, ts in await rt.repo.list_definition_versions(50)
    ]
    return body


@router.post("/reload", responses={422: {"description": "the new set has problems; the old one stays"}})
async def reload(request: Request) -> JSONResponse:
    outcome = await get_reloader(request).reload("api")
    return JSONResponse(outcome.as_dict(), status_code=200 if outcome.ok else 422)


@router.get("/{version}", responses={200: {"content": {"application/yaml": {}}}, 404: {}})
async def definitions_version(
    version: str,
    request: Request,
    rt: RuntimeDep,
    file: Annotated[str | None, Query(max_length=512, description="one file, e.g. rules/gpu-xid.yaml")] = None,
    fmt: Annotated[
        Literal["yaml", "json"] | None, Query(alias="format", description="default: by the Accept header")
    ] = None,
) -> Response:
    """The exact files of a definition set: a YAML stream, JSON `{version, files}`, or one file raw."""
    files = await _files_of(rt, version)
    if files is None:
        raise HTTPException(404, f"no definitions version {version!r} in memory or in the store")
    if file is not None:
        if file not in files:
            raise HTTPException(404, f"version {version} has no file {file!r}; files: {', '.join(sorted(files))}")
        return PlainTextResponse(files[file], media_type=YAML_TYPE)
    wants_json = fmt == "json" or (
        fmt is None and "application/json" in request.headers.get("accept", "")
    )
    if wants_json:
        return JSONResponse({"version": version, "files": files})
    return PlainTextResponse(yaml_stream(version, files), media_type=YAML_TYPE)


async def _files_of(rt: Runtime, version: str) -> dict[str, str] | None:
    known = rt.definitions.get(version)
    if known is not None:
        return dict(known.sources)
    stored = await rt.repo.get_definition_version(version)
    if stored is None:
        return None
    return {str(k): str(v) for k, v in stored.sources.items()}


@ui_router.get("/definitions", response_class=HTMLResponse)
async def definitions_page(request: Request, rt: RuntimeDep) -> Response:
    status = status_of(rt, get_reloader(request))
    refresh = 0 if status["last_reload_ok"] else 10
    return page("definitions.html", {"status": status, "refresh": refresh, "nav_here": "/definitions"})
