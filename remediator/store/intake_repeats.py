"""A delivery that loses a race to store the same alert is a repeat, not a failure.

Two Alertmanagers of an HA pair (or a retry racing the original) can post the same alert at the same moment:
both look up its dedup key, neither finds it, both insert. The intake inserts first deliveries with
`ON CONFLICT (dedup_key) DO NOTHING`; the rows the database skipped were stored by the other delivery a
moment earlier, so they are stored again here as repeats of that row (state `repeat`, `repeat_of` set,
counted in their batch), in the same transaction, and the webhook is answered 200 like any repeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from remediator.store.intake_rows import AlertValues

__all__ = ["as_repeats"]


def as_repeats(
    alert_rows: Sequence[AlertValues], lost: Mapping[str, int]
) -> tuple[list[AlertValues], dict[str, int]]:
    """The skipped first-delivery rows rewritten as repeats of the stored ones, and the extra repeats per batch.

    `lost` maps each dedup key the database skipped to the id of the row that holds it.
    """
    rows: list[AlertValues] = []
    extra: dict[str, int] = {}
    for row in alert_rows:
        key = row.get("dedup_key")
        if key is None or key not in lost:
            continue
        rows.append({**row, "dedup_key": None, "repeat_of": lost[key], "state": "repeat"})
        extra[row["batch_id"]] = extra.get(row["batch_id"], 0) + 1
    return rows, extra
