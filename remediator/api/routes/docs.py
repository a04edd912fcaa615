"""GET /docs/{name}.md: the project's operator docs (docs/*.md of the checkout) rendered as HTML, so that the
web UI's state badges can link to the runbook (docs/operations.md `## Runbook`) without network access.

Headings get the anchors GitHub gives them (`### State: held` -> `#state-held`), so the same links work when
REMEDIATOR_DOCS_URL points at a git host's copy of docs/ instead. The docs folder is REMEDIATOR_DOCS_DIR, else
the checkout's docs/ beside the package (an editable install), else the copy `pip install .` puts in
<prefix>/share/gpu-remediator/docs (pyproject.toml's data-files; the image's too), else ./docs; without one
the page answers 404 saying so. Open like the other UI pages: it holds no data.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from markdown_it import MarkdownIt

from remediator.api.deps import runtime_of
from remediator.api.templating import SECURITY_HEADERS

__all__ = ["docs_dir", "installed_docs", "router", "slug"]

router = APIRouter(tags=["ui"])

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<link rel="stylesheet" href="/static/style.css"></head><body><main class="docs">{body}</main></body></html>"""


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


INSTALLED_DOCS = ("share", "gpu-remediator", "docs")  # where pyproject.toml's data-files put docs/*.md


@cache
def installed_docs() -> Path | None:
    """The docs folder the installed distribution recorded (wherever its scheme put data files: a venv, the
    system prefix, --user), or None when the package is not installed with them."""
    try:
        files = metadata.distribution("gpu-remediator").files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.parts[-4:] == (*INSTALLED_DOCS, "operations.md"):
            return Path(str(file.locate())).resolve().parent
    return None


def docs_dir(configured: str | None) -> Path | None:
    candidates = [Path(configured)] if configured else [
        Path(__file__).resolve().parents[3] / "docs", installed_docs(), Path.cwd() / "docs",
    ]
    return next((c for c in candidates if c is not None and (c / "operations.md").is_file()), None)


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")

    def heading_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("id", slug(tokens[idx + 1].content))
        return str(renderer.renderToken(tokens, idx, options, env))

    md.add_render_rule("heading_open", heading_open)
    return md


_MD = _markdown()


@router.get("/docs/{name}.md", response_class=HTMLResponse, include_in_schema=False)
async def doc_page(name: str, request: Request) -> HTMLResponse:
    if not _NAME.match(name):
        raise HTTPException(404, "no such document")
    folder = docs_dir(runtime_of(request).settings.docs_dir)
    if folder is None:
        raise HTTPException(404, "the docs folder was not found: set REMEDIATOR_DOCS_DIR to the checkout's docs/ "
                                 "or REMEDIATOR_DOCS_URL to where docs/ is published")
    path = folder / f"{name}.md"
    if not path.is_file():
        raise HTTPException(404, f"no document {name}.md")
    text = path.read_text(encoding="utf-8")
    html = _PAGE.format(title=f"gpu-remediator: {name}", body=_MD.render(text))
    return HTMLResponse(html, headers=dict(SECURITY_HEADERS))
