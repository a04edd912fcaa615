"""Prometheus metrics of the controller, on one registry that the API exposes at /metrics.

Names are part of the outside contract (the shipped Grafana dashboard and alerts use them).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]


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
        self.oldest_active = Gauge(
            "remediator_oldest_active_seconds",
            "Age of the oldest remediation in each active state, 0 when none (refreshed by the worker)",
            ["state"], registry=r,
        )
        self.audit_verify_ok = Gauge(
            "remediator_audit_verify_ok",
            "1 while the periodic check of the audit hash chain passes, 0 once it found a problem "
            "(NaN before the first check)",
            registry=r,
        )
        self.audit_verify_ok.set(float("nan"))
