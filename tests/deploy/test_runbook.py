"""The runbook in docs/operations.md: a section per remediation state and per shipped `Remediator*` alert, and
every such alert's `runbook_url` annotation points at an anchor that exists there."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from remediator.domain.states import STATES
from tests.deploy.helpers import MONITORING

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SHIPPED = [MONITORING / "prometheus-rules.yaml", MONITORING / "rules.yml"]


def slug(heading: str) -> str:
    """The anchor GitHub (and the controller's /docs page) gives a heading: lower case, punctuation other than
    `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors() -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", OPERATIONS.read_text(), re.M)}


def remediator_alerts(path: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    groups = doc["spec"]["groups"] if doc.get("kind") == "PrometheusRule" else doc["groups"]
    return [r for g in groups for r in g["rules"] if str(r.get("alert", "")).startswith("Remediator")]


def test_slug_matches_githubs_anchors() -> None:
    assert slug("State: awaiting_approval") == "state-awaiting_approval"
    assert slug("Alert: RemediatorControllerDown") == "alert-remediatorcontrollerdown"
    assert slug("State: waiting on a dependency") == "state-waiting-on-a-dependency"


def test_every_state_has_a_runbook_section() -> None:
    text = OPERATIONS.read_text()
    runbook = text.split("\n## Runbook\n", 1)[1]
    missing = [str(s) for s in STATES if f"\n### State: {s}\n" not in runbook]
    assert missing == [], f"docs/operations.md ## Runbook lacks ### State: {missing}"


def test_every_shipped_remediator_alert_has_a_runbook_url_to_an_existing_section() -> None:
    known = anchors()
    for path in SHIPPED:
        alerts = remediator_alerts(path)
        assert len(alerts) >= 15, path
        for rule in alerts:
            url = rule.get("annotations", {}).get("runbook_url")
            assert url, f"{path.name}: {rule['alert']} has no runbook_url"
            page, _, anchor = url.partition("#")
            assert page.endswith("/docs/operations.md"), url
            assert anchor == slug(f"Alert: {rule['alert']}") and anchor in known, (rule["alert"], url)
