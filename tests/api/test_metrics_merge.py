"""One /metrics for two processes: the web process's and its worker process's expositions merged."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from remediator.process.metrics import Metrics, merge_expositions


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def test_counters_and_histograms_add_up_and_the_worker_s_gauges_stand() -> None:
    web, worker = Metrics(), Metrics()
    web.alerts_received.labels("firing").inc(3)
    worker.alerts_received.labels("firing").inc(2)  # both processes have every metric; each counts its share
    web.webhook_duration.labels("200").observe(0.004)
    web.remediations.labels("reboot-node", "succeeded").inc()
    worker.remediations.labels("reboot-node", "succeeded").inc(4)
    web.remediations_active.labels("running").set(0)
    worker.remediations_active.labels("running").set(7)
    worker.audit_verify_ok.set(1)  # the web process never checks: NaN there
    merged = merge_expositions(generate_latest(web.registry).decode(), generate_latest(worker.registry).decode())
    text = merged.decode()
    samples = _samples(text)
    assert samples[("remediator_alerts_received_total", (("status", "firing"),))] == 5
    assert samples[("remediator_remediations_total", (("outcome", "succeeded"), ("playbook", "reboot-node")))] == 5
    assert samples[("remediator_webhook_duration_seconds_count", (("code", "200"),))] == 1
    assert samples[("remediator_webhook_duration_seconds_bucket", (("code", "200"), ("le", "0.005")))] == 1
    assert samples[("remediator_remediations_active", (("state", "running"),))] == 7
    assert samples[("remediator_audit_verify_ok", ())] == 1
    created = ("remediator_alerts_received_created", (("status", "firing"),))
    assert samples[created] == min(_samples(generate_latest(r.registry).decode())[created] for r in (web, worker))
    for family in ("remediator_alerts_received_total", "remediator_webhook_duration_seconds"):
        assert text.count(f"# TYPE {family} ") == 1


def test_a_merge_with_nothing_is_the_exposition_itself() -> None:
    metrics = Metrics()
    metrics.alerts_received.labels("resolved").inc()
    metrics.recurrences.labels("reset-gpu", "79", "NVIDIA H200", "24h").inc()
    own = generate_latest(metrics.registry)
    assert merge_expositions(own.decode(), "") == own
