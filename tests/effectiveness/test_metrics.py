"""The effectiveness series exist on the controller's registry under their documented names and labels."""

from __future__ import annotations

from prometheus_client import generate_latest

from remediator.process.metrics import Metrics


def test_effectiveness_series_are_exposed_with_their_labels() -> None:
    m = Metrics()
    m.time_to_quarantine.labels("reset-gpu").observe(42)
    m.time_to_return.labels("rma-gpu").observe(3 * 86400)
    m.recurrences.labels("reset-gpu", "79", "NVIDIA H200", "24h").inc()
    m.remediation_outcomes.labels("reset-gpu", "healed").inc(2)
    text = generate_latest(m.registry).decode()
    assert 'remediator_time_to_quarantine_seconds_bucket{le="60.0",playbook="reset-gpu"} 1.0' in text
    # Days fit the buckets: an RMA after three days lands below the one-week bound, not in +Inf only.
    assert 'remediator_time_to_return_seconds_bucket{le="345600.0",playbook="rma-gpu"} 1.0' in text
    assert 'remediator_time_to_return_seconds_bucket{le="172800.0",playbook="rma-gpu"} 0.0' in text
    assert ('remediator_recurrences_total{model="NVIDIA H200",playbook="reset-gpu",window="24h",xid="79"} 1.0'
            in text)
    assert 'remediator_remediation_outcomes_total{outcome="healed",playbook="reset-gpu"} 2.0' in text
