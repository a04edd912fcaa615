"""The alerts' `runbook_url` is the install's: deploy/monitoring/render_rules.py `--docs-url URL` renders the
rules file, the PrometheusRule, or a kustomize overlay of deploy/monitoring with every link on that URL, and
the shipped default names the controller's own Service (which serves docs/ at /docs), not an example host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helpers import MONITORING, NAMESPACE, OVERLAYS, load_script, only, rendered, require_binary

render_rules = load_script(MONITORING / "render_rules.py")
SCRIPT = MONITORING / "render_rules.py"
BASE = "https://remediator.ops.corp.test/gpu/docs"


def script(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60,
                          check=False, cwd=cwd)


def runbook_urls(doc: dict[str, Any]) -> dict[str, str]:
    groups = doc["spec"]["groups"] if doc.get("kind") == "PrometheusRule" else doc["groups"]
    return {r["alert"]: r["annotations"]["runbook_url"] for g in groups for r in g["rules"]
            if "runbook_url" in (r.get("annotations") or {})}


def without_runbook_urls(doc: dict[str, Any]) -> dict[str, Any]:
    for group in doc["spec"]["groups"] if doc.get("kind") == "PrometheusRule" else doc["groups"]:
        for rule in group["rules"]:
            (rule.get("annotations") or {}).pop("runbook_url", None)
    return doc


def shipped() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())
    return doc


def test_the_default_names_the_controllers_service_that_serves_the_docs() -> None:
    service = only(rendered(OVERLAYS["single"]), "Service", "gpu-remediator")
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "http"]
    assert f"http://gpu-remediator.{NAMESPACE}.svc:{port}/docs" == render_rules.DEFAULT_DOCS_URL
    urls = runbook_urls(shipped())
    assert len(urls) >= 15
    assert all(u == f"{render_rules.DEFAULT_DOCS_URL}/operations.md#alert-{a.lower()}" for a, u in urls.items())
    rules_file = yaml.safe_load((MONITORING / "rules.yml").read_text())
    assert runbook_urls(rules_file) == urls


def test_a_rendered_rules_file_carries_the_given_base_and_promtool_passes(tmp_path: Path) -> None:
    done = script("--docs-url", BASE + "/", "-o", str(tmp_path / "rules.yml"))
    assert done.returncode == 0, done.stderr
    rules = yaml.safe_load((tmp_path / "rules.yml").read_text())
    urls = runbook_urls(rules)
    assert urls.keys() == runbook_urls(shipped()).keys()
    assert all(u == f"{BASE}/operations.md#alert-{a.lower()}" for a, u in urls.items()), urls
    # Nothing else moves.
    assert without_runbook_urls(rules) == {"groups": without_runbook_urls(shipped())["spec"]["groups"]}

    promtool = require_binary("promtool", "prometheus")
    checked = subprocess.run([promtool, "check", "rules", "--lint=none", "rules.yml"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The controller group's unit tests expect the annotations too: with the same base, they pass.
    tests = (MONITORING / "rules_controller_test.yml").read_text()
    assert tests.count(render_rules.DEFAULT_DOCS_URL) >= 15
    (tmp_path / "rules_controller_test.yml").write_text(tests.replace(render_rules.DEFAULT_DOCS_URL, BASE))
    tested = subprocess.run([promtool, "test", "rules", "rules_controller_test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    # ... and they do check the URL: against the shipped base they fail.
    (tmp_path / "rules_controller_test.yml").write_text(tests)
    stale = subprocess.run([promtool, "test", "rules", "rules_controller_test.yml"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60, check=False)
    assert stale.returncode != 0 and BASE in stale.stdout + stale.stderr


def test_a_rendered_prometheus_rule_carries_the_given_base() -> None:
    done = script("--docs-url", BASE, "--prometheus-rule")
    assert done.returncode == 0, done.stderr
    doc = yaml.safe_load(done.stdout)
    assert doc["kind"] == "PrometheusRule" and doc["metadata"] == shipped()["metadata"]
    assert set(runbook_urls(doc).values()) == {f"{BASE}/operations.md#alert-{a.lower()}"
                                               for a in runbook_urls(shipped())}
    assert without_runbook_urls(doc) == without_runbook_urls(shipped())


def test_the_kustomize_overlay_renders_deploy_monitoring_with_the_given_base(tmp_path: Path) -> None:
    overlay = tmp_path / "my-monitoring"
    done = script("--docs-url", BASE, "--kustomize", str(overlay))
    assert done.returncode == 0, done.stderr
    ours = rendered(overlay)
    theirs = rendered(MONITORING)
    rule = only(ours, "PrometheusRule")
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert set(runbook_urls(rule).values()) == {f"{BASE}/operations.md#alert-{a.lower()}"
                                                for a in runbook_urls(shipped())}
    assert without_runbook_urls(rule) == without_runbook_urls(only(theirs, "PrometheusRule"))
    assert [o for o in ours if o["kind"] != "PrometheusRule"] == [o for o in theirs if o["kind"] != "PrometheusRule"]


def test_the_overlay_refuses_to_build_when_a_rule_moved(tmp_path: Path) -> None:
    """Each replace is guarded by a test of the rule's name: a rule list changed upstream fails the build
    rather than giving an alert another alert's runbook."""
    overlay = tmp_path / "my-monitoring"
    assert script("--docs-url", BASE, "--kustomize", str(overlay)).returncode == 0
    patch = yaml.safe_load((overlay / "runbook-urls.yaml").read_text())
    tests = [op for op in patch if op["op"] == "test"]
    assert len(tests) == len(runbook_urls(shipped()))
    tests[0]["value"] = "RemediatorSomethingElse"
    (overlay / "runbook-urls.yaml").write_text(yaml.safe_dump(patch))
    kubectl = require_binary("kubectl", "kubernetes-client")
    done = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode != 0, done.stdout


@pytest.mark.parametrize("url", ["/docs", "gpu-remediator/docs", "ftp://host/docs", "https:///docs",
                                 "https://host/docs?x=1", "https://host/docs#top"])
def test_a_docs_url_people_cannot_open_is_refused(url: str, tmp_path: Path) -> None:
    done = script("--docs-url", url, "-o", str(tmp_path / "rules.yml"))
    assert done.returncode == 2
    assert "--docs-url" in done.stderr and "http" in done.stderr, done.stderr
    assert not (tmp_path / "rules.yml").exists()


def test_kustomize_needs_a_docs_url(tmp_path: Path) -> None:
    done = script("--kustomize", str(tmp_path / "x"))
    assert done.returncode == 2 and "--kustomize needs --docs-url" in done.stderr
