"""Prometheus metrics of the controller, on one registry that the API exposes at /metrics.

Names are part of the outside contract (the shipped Grafana dashboard and alerts use them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["LONG_BUCKETS", "Metrics", "merge_expositions"]

# Seconds to a week: a GPU reset returns in a minute, a reboot in tens of minutes, an RMA in days.
LONG_BUCKETS = (
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
    172800.0, 345600.0, 604800.0,
)


class Metrics:
    """One instance per process (tests make their own, so registries never collide)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.alerts_received = Counter(
            "remediator_alerts_received", "Alerts received by webhook, by alert status", ["status"], registry=r
        )
        self.alerts_repeated = Counter(
            "remediator_alerts_repeated", "Repeated deliveries recorded and not processed again", registry=r
        )
        self.webhook_unavailable = Counter(
            "remediator_webhook_unavailable", "Webhooks answered 503 (store unavailable), by reason", ["reason"],
            registry=r,
        )
        self.webhook_duration = Histogram(
            "remediator_webhook_duration_seconds", "Webhook handling time including the durable commit",
            ["code"], registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.remediations = Counter(
            "remediator_remediations", "Remediations finished, by playbook and outcome", ["playbook", "outcome"],
            registry=r,
        )
        self.remediations_active = Gauge(
            "remediator_remediations_active", "Remediations by state (refreshed by the worker)", ["state"],
            registry=r,
        )
        self.step_duration = Histogram(
            "remediator_step_duration_seconds", "Step run time by action and outcome", ["action", "outcome"],
            registry=r, buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900),
        )
        self.guardrail_trips = Counter(
            "remediator_guardrail_trips", "Remediations held by a guardrail", ["guardrail"], registry=r
        )
        self.paused = Gauge("remediator_paused", "1 while the kill switch is on", registry=r)
        # The return-to-service gate's verdicts: passed, failed (a readable GPU failed a named check: the
        # ladder may climb) and unknown (the node agent or the GPUs could not be read: counted once a look).
        self.gate_verdicts = Counter(
            "remediator_gate_verdicts", "Validation gate verdicts, by playbook and verdict (passed, failed, unknown)",
            ["playbook", "verdict"], registry=r,
        )
        self.reload_success = Gauge(
            "remediator_definitions_last_reload_success", "1 if the last definitions load succeeded", registry=r
        )
        self.reload_timestamp = Gauge(
            "remediator_definitions_last_reload_timestamp_seconds", "Time of the last definitions load",
            registry=r,
        )
        self.notifications = Counter(
            "remediator_notifications", "Notifications sent, by channel and outcome", ["channel", "outcome"],
            registry=r,
        )
        self.plan_only = Gauge("remediator_plan_only", "1 when running plan-only (dry run)", registry=r)
        # Effectiveness (docs/effectiveness.md); observed by the executor and worker as remediations end.
        self.time_to_quarantine = Histogram(
            "remediator_time_to_quarantine_seconds",
            "Seconds from the alert's start to the target being quarantined (cordoned or tainted), by playbook",
            ["playbook"], registry=r, buckets=LONG_BUCKETS,
        )
        self.time_to_return = Histogram(
            "remediator_time_to_return_seconds",
            "Seconds from the quarantine to the target returning to service (proof passed), by playbook",
            ["playbook"], registry=r, buckets=LONG_BUCKETS,
        )
        self.recurrences = Counter(
            "remediator_recurrences",
            "Faults of a GPU (or node) within `window` (24h or 7d) after a remediation returned it to service",
            ["playbook", "xid", "model", "window"], registry=r,
        )
        self.remediation_outcomes = Counter(
            "remediator_remediation_outcomes",
            "Remediations judged healed, recurred or escalated once decided, by playbook",
            ["playbook", "outcome"], registry=r,
        )
        self.oldest_active = Gauge(
            "remediator_oldest_active_seconds",
            "Age of the oldest remediation in each active state, 0 when none (refreshed by the worker)",
            ["state"], registry=r,
        )
        self.intake_spool_problems = Counter(
            "remediator_intake_spool_problems",
            "Intake spool files found removed or replaced while in use (`displaced`: webhooks refused until a "
            "restart) or damaged (`damaged`: set aside, a fresh spool started), worker process mode",
            ["problem"], registry=r,
        )
        self.alerts_undecided = Gauge(
            "remediator_alerts_undecided",
            "Alerts acknowledged but not yet decided: `spooled` in the intake spool (worker process mode), "
            "`stored` in the database (refreshed by the worker)",
            ["where"], registry=r,
        )
        self.remediations_waiting = Gauge(
            "remediator_remediations_waiting",
            "Active remediations waiting for a dependency that keeps failing transiently (kubernetes API, "
            "node agent), by dependency (refreshed by the worker)",
            ["dependency"], registry=r,
        )
        self.audit_verify_ok = Gauge(
            "remediator_audit_verify_ok",
            "1 while the periodic check of the audit hash chain passes, 0 once it found a problem "
            "(NaN before the first check)",
            registry=r,
        )
        self.audit_verify_ok.set(float("nan"))
        # The database as this process finds it (store/availability.py), read at each scrape: 0 and a growing
        # number of seconds while it does not answer or the replica guard's connection to it is down.
        self.database_up = Gauge(
            "remediator_database_up",
            "1 while the database answers this controller and its replica guard is held, 0 while not",
            registry=r,
        )
        self.database_up.set(1)
        self.database_unavailable_seconds = Gauge(
            "remediator_database_unavailable_seconds",
            "Seconds since the database stopped answering this controller, 0 while it answers",
            registry=r,
        )

    def watch_database(self, up: Callable[[], bool], down_for: Callable[[], float]) -> None:
        """Read the database gauges from these at each scrape."""
        self.database_up.set_function(lambda: 1.0 if up() else 0.0)
        self.database_unavailable_seconds.set_function(down_for)


_SUMMED = {"counter", "histogram", "summary"}


def merge_expositions(own: str, worker: str) -> bytes:
    """One exposition of the web process's metrics and its worker process's (REMEDIATOR_WORKER_PROCESS).

    Both processes create every metric; each updates its own share. Counters, histograms and summaries are
    added up sample by sample (a `_created` sample keeps the earlier time); for gauges the worker's value
    stands, since the worker keeps the state gauges (active remediations, audit check, pause) current.
    """
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
    for text, from_worker in ((own, False), (worker, True)):
        for family in text_string_to_metric_families(text):
            into = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            samples = values.setdefault(family.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                before = samples.get(key)
                if before is None:
                    samples[key] = sample
                elif sample.name.endswith("_created"):
                    samples[key] = sample._replace(value=min(before.value, sample.value))
                elif into.type in _SUMMED:
                    samples[key] = sample._replace(value=before.value + sample.value)
                elif from_worker:
                    samples[key] = sample
    for name, metric in merged.items():
        metric.samples = list(values[name].values())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(merged.values())))
    return generate_latest(registry)


class _Fixed:
    """A collector that yields metric families already gathered."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)
