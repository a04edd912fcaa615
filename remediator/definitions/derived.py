"""Values derived from one loaded definition set, computed once per set instead of once per alert.

A storm decides thousands of alerts against the same `DefinitionSet`; the plan each remediation records
carries its playbook as JSON and the content hashes of its rule and playbook (engine/versions.py), which
are the same for every alert that picks them. A set is immutable once loaded, so what is derived from it
can be kept for as long as the set lives (the memo goes with it: keyed by identity, checked by a weak
reference, so a reloaded set never sees its predecessor's values).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar, cast

__all__ = ["derived"]

T = TypeVar("T")
_MEMOS: dict[int, tuple[weakref.ref[object], dict[Hashable, object]]] = {}


def derived(owner: object, key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()` for (`owner`, `key`), computed on first use and kept while `owner` lives."""
    entry = _MEMOS.get(id(owner))
    if entry is None or entry[0]() is not owner:
        for ident in [i for i, (ref, _) in _MEMOS.items() if ref() is None]:
            del _MEMOS[ident]
        entry = (weakref.ref(owner), {})
        _MEMOS[id(owner)] = entry
    memo = entry[1]
    if key not in memo:
        memo[key] = compute()
    return cast(T, memo[key])  # stored by this function under this key: a T
