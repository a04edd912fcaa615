"""docs/PERFORMANCE.md stays a reference: a section for every benchmark, links that land, and the figures
other documents quote still there to be found."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from remediator.api.routes.docs import slug

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "PERFORMANCE.md"
SCRIPTS = sorted(
    p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_") and p.name != "bare_app.py"
)


def headings() -> list[str]:
    return re.findall(r"^#{1,6} (.+)$", DOC.read_text(), re.MULTILINE)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_has_a_section(script: str) -> None:
    assert any(f"`bench/{script}`" in h for h in headings()), script
    section = DOC.read_text().split(next(h for h in headings() if f"`bench/{script}`" in h), 1)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.MULTILINE)[0]
    assert "**Run.**" in section and "**Limits.**" in section
    assert re.search(r"^\| machine", section, re.MULTILINE) or "Machine: " in section


def test_links_into_it_land_on_a_heading() -> None:
    anchors = {slug(h) for h in headings()}
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for source in sources:
        text = source.read_text()
        own = re.findall(r"\]\(#([^)]+)\)", text) if source == DOC else []
        for anchor in own + re.findall(r"PERFORMANCE\.md#([^)\s]+)", text):
            assert anchor in anchors, f"{source.name}: #{anchor}"


@pytest.mark.parametrize("figure", [
    "47.5", "1,116.5",  # docs/security.md, L12: the detector's per-line cost after 20,000 series
    "313-341 MB", "350-385 MB",  # docs/deploy.md and deploy/overlays/single: two processes' memory
    "0.079",  # docs/operations.md: node Ready from a new boot -> the gate goes on, p50
    "1.4-3.4 ms", "synchronous=FULL",  # docs/architecture.md: the cost of the intake's fsync
])
def test_figures_quoted_elsewhere_are_here(figure: str) -> None:
    assert figure in DOC.read_text().replace("\n  ", " ")
