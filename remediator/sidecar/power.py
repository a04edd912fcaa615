"""Power-limit changes and their restore, run as one step on the NVML thread.

The target is validated against the GPU's own constraints (422 naming the allowed range), the limit in
force before the first change is written to the node's state file before NVML is touched, and setting
a value already in force changes nothing and says so, so a retried step is harmless.

The limit the sidecar set is kept beside the original. A restore puts the original back only while
that limit is still in force: a limit someone else set after the cap (an operator with nvidia-smi, or
another tool) is theirs, so the restore leaves it, forgets the record and answers `restored: false`
with the reason, the limit in force and the one the sidecar had set.
"""

from __future__ import annotations

from remediator.sidecar.inventory import find_handle, watts
from remediator.sidecar.nvml import Nvml
from remediator.sidecar.problems import Problem
from remediator.sidecar.schemas import PowerLimitAnswer, PowerLimitRequest, PowerRestoreAnswer
from remediator.sidecar.state import PowerStateStore

__all__ = ["restore_power_limit", "set_power_limit"]


def _target_mw(default_mw: int, request: PowerLimitRequest) -> int:
    if request.watts is not None:
        return round(request.watts * 1000)
    assert request.percent_of_default is not None  # the request's validator: exactly one of the two
    return round(default_mw * request.percent_of_default / 100.0)


def set_power_limit(nvml: Nvml, store: PowerStateStore, uuid: str, request: PowerLimitRequest) -> PowerLimitAnswer:
    """Set the limit (or, with dry_run, say what would be set); remembers the original first."""
    dry_run = request.dry_run
    handle = find_handle(nvml, uuid)
    current = nvml.power_limit_mw(handle)
    default = nvml.default_power_limit_mw(handle)
    low, high = nvml.power_limit_constraints_mw(handle)
    target = _target_mw(default, request)
    if not low <= target <= high:
        raise Problem(
            422,
            f"power limit {target / 1000:g} W is outside the allowed range {low / 1000:g}-{high / 1000:g} W "
            f"for {uuid}",
            details={
                "requested_watts": target / 1000,
                "min_watts": low / 1000,
                "max_watts": high / 1000,
                "default_watts": default / 1000,
            },
        )
    original = store.original_mw(uuid)
    result = PowerLimitAnswer(
        uuid=uuid,
        dry_run=dry_run,
        previous_watts=watts(current),
        new_watts=watts(target),
        default_watts=watts(default),
        min_watts=watts(low),
        max_watts=watts(high),
        original_watts=watts(original if original is not None else current),
        changed=current != target,
    )
    if current == target:
        result.message = f"power limit already {target / 1000:g} W; nothing changed"
        return result
    if dry_run:
        result.message = f"would set power limit {current / 1000:g} W -> {target / 1000:g} W"
        return result
    first_change = original is None
    previous_set = store.set_mw(uuid)
    store.remember_change(uuid, current, target)
    try:
        nvml.set_power_limit_mw(handle, target)
    # broad: BaseException so the remembered limit is put back whatever interrupted the NVML call (NvmlError, a cancel);
    # re-raised
    except BaseException:
        if first_change:
            store.forget(uuid)
        else:
            store.remember_set(uuid, previous_set)
        raise
    in_force = nvml.power_limit_mw(handle)
    if in_force != target:  # the device rounded it: compare restores against what it holds
        store.remember_set(uuid, in_force)
    result.message = f"power limit set {current / 1000:g} W -> {target / 1000:g} W"
    return result


def restore_power_limit(nvml: Nvml, store: PowerStateStore, uuid: str, dry_run: bool) -> PowerRestoreAnswer:
    """Put back the remembered original limit and forget it; nothing remembered: nothing to do."""
    handle = find_handle(nvml, uuid)
    current = nvml.power_limit_mw(handle)
    original = store.original_mw(uuid)
    capped = store.set_mw(uuid)
    result = PowerRestoreAnswer(
        uuid=uuid,
        dry_run=dry_run,
        previous_watts=watts(current),
        new_watts=watts(current if original is None else original),
        changed=original is not None and original != current,
        restored=False,
    )
    if original is None:
        result.message = "no remembered power limit for this GPU; nothing to restore"
        return result
    if capped is not None and capped != current and original != current:
        return _left_alone(store, uuid, result, current, capped, original, dry_run)
    if dry_run:
        result.message = f"would restore power limit {current / 1000:g} W -> {original / 1000:g} W"
        return result
    if original != current:
        nvml.set_power_limit_mw(handle, original)
    store.forget(uuid)
    result.restored = True
    result.message = (
        f"power limit restored {current / 1000:g} W -> {original / 1000:g} W"
        if original != current
        else f"power limit already at the original {original / 1000:g} W; record cleared"
    )
    return result


def _left_alone(
    store: PowerStateStore,
    uuid: str,
    result: PowerRestoreAnswer,
    current: int,
    capped: int,
    original: int,
    dry_run: bool,
) -> PowerRestoreAnswer:
    """The limit in force is neither the one the sidecar set nor the original: someone else's, kept."""
    result = result.model_copy(
        update={
            "new_watts": watts(current),
            "changed": False,
            "left_alone": True,
            "reason": "changed by another actor",
            "current_watts": watts(current),
            "capped_watts": watts(capped),
            "original_watts": watts(original),
        }
    )
    verb = "would leave" if dry_run else "left"
    result.message = (
        f"power limit is {current / 1000:g} W, not the {capped / 1000:g} W the sidecar set: changed by another "
        f"actor, {verb} as it is (the original was {original / 1000:g} W)"
    )
    if not dry_run:
        store.forget(uuid)
    return result
