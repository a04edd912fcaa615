"""What the pages say about a remediation beyond its row: the state a person should read, the alert's
severity and Xid, and the links out to Prometheus, Alertmanager and Grafana.

A plan-only controller finishes its remediations in the `planned` state (domain/states.py), which the pages
show as the API and the CLI do. Links to other tools are built from settings
(`REMEDIATOR_ALERTMANAGER_URL`, `REMEDIATOR_GRAFANA_URL`, `REMEDIATOR_GRAFANA_DASHBOARD`); a link whose base
is not configured is not shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol
from urllib.parse import quote, urlencode, urlsplit

from remediator.domain.plan_snapshot import plan_of
from remediator.domain.states import shown_state
from remediator.settings import Settings
from remediator.store.models import AuditEvent, Remediation, StepRow
from remediator.store.read_store import RemediationSummary

__all__ = [
    "display_state", "event_step", "grafana_link", "http_link", "list_facts", "remediation_facts", "silence_link",
    "silence_matchers",
]


class _Stated(Protocol):
    """A remediation as far as its shown state goes: a stored row or a list line (`RemediationSummary`)."""

    @property
    def state(self) -> str: ...

    @property
    def state_reason(self) -> str | None: ...


def display_state(rem: _Stated, steps: Iterable[StepRow] | None = None) -> str:
    """The state the API and the CLI say too (a plan-only run is stored `planned`; rows from before read so)."""
    del steps  # the stored state says it all
    return shown_state(rem.state, rem.state_reason)


def http_link(url: str | None) -> str | None:
    """The URL when it is an absolute http(s) link (anything else is never put in an href)."""
    if not url:
        return None
    parts = urlsplit(url.strip())
    return url.strip() if parts.scheme in ("http", "https") and parts.netloc else None


def _quote_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def silence_matchers(labels: Mapping[str, object], node: str | None) -> str:
    """`{alertname="..",Hostname=".."}`: the alert name and the label that names the node."""
    parts = []
    if labels.get("alertname"):
        parts.append(f'alertname="{_quote_value(str(labels["alertname"]))}"')
    node_label = next((k for k in ("Hostname", "hostname", "node", "kubernetes_node", "instance")
                       if labels.get(k)), None)
    if node_label is not None:
        parts.append(f'{node_label}="{_quote_value(str(labels[node_label]))}"')
    elif node:
        parts.append(f'Hostname="{_quote_value(node)}"')
    return "{" + ",".join(parts) + "}"


def silence_link(settings: Settings, labels: Mapping[str, object], node: str | None) -> str | None:
    """Alertmanager's new-silence form, prefilled with the alert's name and node."""
    base = http_link(settings.alertmanager_url)
    if base is None:
        return None
    return f"{base.rstrip('/')}/#/silences/new?filter={quote(silence_matchers(labels, node), safe='')}"


def grafana_link(settings: Settings, node: str | None, gpu: str | None) -> str | None:
    """The configured Grafana dashboard for the node (and GPU), as `var-node` / `var-gpu`."""
    base = http_link(settings.grafana_url)
    if base is None or not node:
        return None
    query: dict[str, str] = {"var-node": node}
    if gpu:
        query["var-gpu"] = gpu
    path = "/" + settings.grafana_dashboard.lstrip("/")
    return f"{base.rstrip('/')}{path}{'&' if '?' in path else '?'}{urlencode(query)}"


def _xid(plan_xid: object, labels: Mapping[str, str]) -> Mapping[str, object] | None:
    """The plan's Xid entry when it has a code, else the alert's `xid` label."""
    if isinstance(plan_xid, dict) and plan_xid.get("code") is not None:
        return plan_xid
    code = labels.get("xid")
    return {"code": code, "description": None, "resolution": None} if code else None


def remediation_facts(settings: Settings, rem: Remediation, generator_url: str | None) -> dict[str, object]:
    """Severity, Xid and outbound links of one remediation, for the list and detail pages."""
    labels = rem.alert_labels or {}
    gpu = rem.gpu_index if rem.gpu_index not in (None, "") else rem.gpu_uuid
    return {
        "severity": labels.get("severity"),
        "xid": _xid(plan_of(rem).xid_json or None, labels),
        "graph": http_link(generator_url),
        "silence": silence_link(settings, labels, rem.node),
        "grafana": grafana_link(settings, rem.node, gpu),
    }


def list_facts(line: RemediationSummary) -> dict[str, object]:
    """Severity and Xid of one line of the list (the index shows no links), as `remediation_facts` has them."""
    labels = line.alert_labels or {}
    return {"severity": labels.get("severity"), "xid": _xid(line.plan_xid, labels)}


def event_step(event: AuditEvent) -> str | None:
    """`step 2 "drain" (revert)` for an audit event about a step, else None."""
    data = event.data or {}
    step = data.get("step")
    name = step if isinstance(step, str) else data.get("step_name")
    index = data.get("index")
    if index is None and isinstance(step, int) and not isinstance(step, bool):
        index = step
    if name is None and index is None:
        return None
    text = f'step {index} "{name}"' if index is not None and name else f'step "{name}"' if name else f"step {index}"
    if data.get("phase") == "revert":
        text += " (revert)"
    return text
