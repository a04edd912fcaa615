"""All reads and writes of the store. Routes and the worker call these; nobody writes SQL inline.

Every state change is written with its audit event in the same transaction. Writes made on behalf of a
worker check its lease (`owner`), so a replica that lost its lease cannot record a step twice. The methods
live in one module per concern (intake, batched decisions, remediations, steps, approvals, flags, reads)
over one unit of work (`transactions.py`); `Repository` puts them together.
"""

from __future__ import annotations

from remediator.store.approval_store import ApprovalStore
from remediator.store.decision_store import DecisionStore
from remediator.store.flag_store import FlagStore
from remediator.store.intake_store import IntakeStore
from remediator.store.node_hold_store import NodeHoldStore
from remediator.store.pause_store import PauseStore
from remediator.store.read_store import ReadStore
from remediator.store.session_store import SessionStore
from remediator.store.silence_store import SilenceStore
from remediator.store.step_store import StepStore
from remediator.store.storm_store import StormStore
from remediator.store.transactions import LARGE_COLUMNS, NewRemediation, StoredBatch, utcnow

__all__ = ["LARGE_COLUMNS", "NewRemediation", "Repository", "StoredBatch", "utcnow"]


class Repository(
    IntakeStore, DecisionStore, StepStore, ApprovalStore, FlagStore, ReadStore, SessionStore, SilenceStore,
    NodeHoldStore, PauseStore, StormStore,
):
    """The store's whole API: one instance per process, shared by the API and the worker."""
