"""The facts read for a batch of alerts, handed out per alert as `decide_alert` wants them (engine/decision.py).

The worker reads them for a whole claimed batch in two queries (store/decision_store.py): the recent firing
alerts on the batch's nodes, and the nodes' remediation history. This picks each alert's share: the alerts
of its name on its GPU, and its node's history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime

from remediator.engine.decision import DecisionFacts, LadderRemediation
from remediator.intake.normalize import GpuAlert

__all__ = ["BatchFacts"]

_GPU_LABELS = ("UUID", "gpu")


class BatchFacts:
    """Recent alerts by (alert name, node) and remediation history by node, for one batch."""

    def __init__(
        self, now: datetime, recent: Sequence[tuple[str, Mapping[str, str], Mapping[str, str]]],
        histories: Mapping[str, Sequence[LadderRemediation]], node_labels: Sequence[str],
    ) -> None:
        self.now = now
        self.histories = histories
        self._recent: dict[tuple[str, str], list[tuple[Mapping[str, str], Mapping[str, str]]]] = defaultdict(list)
        for alertname, labels, notes in recent:
            for node in {str(labels[key]) for key in node_labels if labels.get(key)}:
                self._recent[(alertname, node)].append((labels, notes))

    def of(self, alert: GpuAlert) -> DecisionFacts:
        gpu = alert.gpu_uuid or alert.gpu_index
        on_gpu = [
            (labels, annotations) for labels, annotations in self._recent.get((alert.alertname, alert.node or ""), [])
            if gpu and any(str(labels.get(key, "")) == gpu for key in _GPU_LABELS)
        ]
        return DecisionFacts(now=self.now, gpu_alerts=on_gpu, node_history=self.histories.get(alert.node or "", ()))
