"""The shipped Grafana dashboards: they load, every query parses (promtool) and names only real series."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helpers import MONITORING, only, rendered, require_binary
from tests.deploy.promql import metric_names
from tests.deploy.test_monitoring import DCGM_METRICS, EFFECTIVENESS_METRICS

DASHBOARDS = sorted(MONITORING.glob("grafana-*dashboard.json"))
FLEET = MONITORING / "grafana-fleet-dashboard.json"
CONTROLLER = MONITORING / "grafana-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Concrete values for Grafana's variables, so that promtool sees plain PromQL.
VARIABLES = {
    "__rate_interval": "2m",
    "__interval": "1m",
    "__range": "6h",
    "node": "gpu-node-1",
    "gpu": "0",
}
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def board(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def all_panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    found, todo = [], list(doc["panels"])
    while todo:
        panel = todo.pop(0)
        todo.extend(panel.get("panels", []))
        found.append(panel)
    return found


def queries(doc: dict[str, Any]) -> list[str]:
    """Every PromQL expression: panel targets, annotations, and the selectors of label_values() variables."""
    exprs = [t["expr"] for p in all_panels(doc) for t in p.get("targets", [])]
    exprs += [a["expr"] for a in doc["annotations"]["list"] if "expr" in a]
    for variable in doc["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
            assert found is not None, variable["name"]
            exprs.append(found.group(1))
    return exprs


def concrete(expr: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return VARIABLES.get(name, match.group(0))  # `$1` of label_replace stays

    return _VARIABLE.sub(value, expr)


def series(registry: Any) -> set[str]:
    """The series names a prometheus_client registry exposes, read from its families."""
    names = set()
    for family in registry.collect():
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
        elif family.type == "histogram":
            names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "count", "sum", "created")}
        else:
            names.add(family.name)
    return names


def controller_series() -> set[str]:
    from remediator.process.metrics import Metrics

    pending = set()
    for name, kind in EFFECTIVENESS_METRICS.items():
        pending |= {f"{name}_{s}" for s in ("bucket", "count", "sum")} if kind == "histogram" else {name}
    return series(Metrics().registry) | pending


def sidecar_series() -> set[str]:
    from remediator.sidecar.metrics import SidecarMetrics

    return series(SidecarMetrics().registry)


def promtool_check(tmp_path: Path, exprs: list[str]) -> subprocess.CompletedProcess[str]:
    promtool = require_binary("promtool", "prometheus")
    rules = [{"record": f"dashboard:query_{i}:expr", "expr": concrete(e)} for i, e in enumerate(exprs)]
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    return subprocess.run(
        [promtool, "check", "rules", "--lint=none", "queries.yml"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )


def test_both_dashboards_are_shipped() -> None:
    assert sorted([CONTROLLER, FLEET]) == DASHBOARDS


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_loads_with_a_datasource_variable(path: Path) -> None:
    doc = board(path)
    assert doc["uid"] and doc["title"]
    assert doc["schemaVersion"] >= 39
    (datasource,) = [v for v in doc["templating"]["list"] if v["name"] == "datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    ids = [p["id"] for p in all_panels(doc)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in all_panels(doc):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert [t["refId"] for t in panel["targets"]] == [chr(65 + i) for i in range(len(panel["targets"]))]
        assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), panel["title"]
    for annotation in doc["annotations"]["list"]:
        assert annotation["datasource"] == DATASOURCE, annotation["name"]
    for variable in doc["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]


def test_dashboard_uids_differ() -> None:
    uids = [board(p)["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_parses_with_promtool(path: Path, tmp_path: Path) -> None:
    exprs = queries(board(path))
    assert exprs
    for expr in exprs:
        assert not set(_VARIABLE.findall(concrete(expr))) - {("", "1")}, f"unknown variable in {expr}"
    done = promtool_check(tmp_path, exprs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in done.stdout


def test_the_promtool_check_rejects_a_broken_query(tmp_path: Path) -> None:
    done = promtool_check(tmp_path, ["sum by (gpu) (rate(DCGM_FI_DEV_GPU_TEMP[$__rate_interval])"])
    assert done.returncode != 0


def test_controller_dashboard_names_only_controller_series() -> None:
    allowed = controller_series()
    for expr in queries(board(CONTROLLER)):
        names = metric_names(expr)
        assert names and names <= allowed, (expr, names - allowed)


def test_fleet_dashboard_names_only_exporter_sidecar_and_controller_series() -> None:
    allowed = DCGM_METRICS | sidecar_series() | controller_series() | {"ALERTS"}
    used: set[str] = set()
    for expr in queries(board(FLEET)):
        names = metric_names(expr)
        assert names and names <= allowed, (expr, names - allowed)
        used |= names
    assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "gpu_remediator_xid_events_total"} <= used


def test_fleet_dashboard_drills_from_node_to_gpu() -> None:
    doc = board(FLEET)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert "Hostname" in variables["node"]["query"]["query"]
    assert "$node" in variables["gpu"]["query"]["query"], "the GPU list follows the chosen nodes"
    rows = [p["title"] for p in doc["panels"] if p["type"] == "row"]
    assert rows == ["Fleet", "Node: $node", "GPU: $gpu"]
    in_row: dict[str, list[dict[str, Any]]] = {}
    current = ""
    for panel in sorted(doc["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        if panel["type"] == "row":
            current = panel["title"]
        else:
            in_row.setdefault(current, []).append(panel)
    for title, variable in (("Node: $node", "$node"), ("GPU: $gpu", "$gpu")):
        for panel in in_row[title]:
            assert all(variable in t["expr"] for t in panel["targets"]), panel["title"]


def panel(doc: dict[str, Any], title: str) -> dict[str, Any]:
    (found,) = [p for p in all_panels(doc) if p.get("title") == title]
    return found


def test_xid_panel_reads_both_exporter_shapes_and_the_sidecar() -> None:
    exprs = [t["expr"] for t in panel(board(FLEET), "Xid events")["targets"]]
    assert any('DCGM_FI_DEV_XID_ERRORS{' in e and 'err_code=""' in e for e in exprs), "before 3.3.6"
    assert any('DCGM_FI_DEV_XID_ERRORS{' in e and 'err_code!=""' in e for e in exprs), "3.3.6 and later"
    assert any("gpu_remediator_xid_events_total" in e for e in exprs)


def test_abnormal_gpu_table_covers_every_failure_it_names() -> None:
    table = panel(board(FLEET), "Abnormal GPUs")
    assert table["type"] == "table"
    used = set().union(*(metric_names(t["expr"]) for t in table["targets"]))
    assert {
        "DCGM_FI_DEV_GPU_TEMP",  # hot
        "DCGM_FI_DEV_XID_ERRORS", "gpu_remediator_xid_events_total",  # Xid
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",  # ECC
        "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE",  # remaps
        "gpu_remediator_gpu_lost",  # lost
    } <= used
    assert all(t["format"] == "table" and t["instant"] for t in table["targets"])
    assert all("by (Hostname, gpu, UUID)" in t["expr"] for t in table["targets"]), "rows merge per GPU"


def test_framebuffer_panel_never_names_the_exporter_pod() -> None:
    exprs = [t["expr"] for t in panel(board(FLEET), "Framebuffer used by pod")["targets"]]
    assert any('exported_pod!=""' in e for e in exprs)
    assert any('pod!~"nvidia-dcgm-exporter-.*|dcgm-exporter-.*"' in e for e in exprs)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_remediations_are_annotations(path: Path) -> None:
    annotations = board(path)["annotations"]["list"]
    assert any("remediator_remediations_total" in a["expr"] and a["enable"] for a in annotations)


def test_controller_dashboard_shows_outcomes_latencies_and_effectiveness() -> None:
    used = set().union(*(metric_names(e) for e in queries(board(CONTROLLER))))
    for name, kind in EFFECTIVENESS_METRICS.items():
        wanted = f"{name}_bucket" if kind == "histogram" else name
        assert wanted in used, name
    assert {"remediator_remediations_total", "remediator_step_duration_seconds_bucket",
            "remediator_webhook_duration_seconds_bucket"} <= used


@pytest.mark.parametrize(
    ("path", "configmap"),
    [(CONTROLLER, "gpu-remediator-dashboard"), (FLEET, "gpu-remediator-fleet-dashboard")],
    ids=["controller", "fleet"],
)
def test_each_dashboard_ships_in_a_labelled_configmap(path: Path, configmap: str) -> None:
    found = only(rendered(MONITORING), "ConfigMap", configmap)
    assert found["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = found["data"].values()
    assert json.loads(text) == board(path)
