"""Which versions of the definitions a remediation ran with, and keeping their sources in the store.

A definition set's version is the hash of all its files (`DefinitionSet.version`). Each remediation also
records the file its rule and its playbook came from, with that file's hash, and a hash of the rule and
of the playbook themselves, so a reviewer can tell "the playbook changed" from "some other file changed".
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache

import yaml

from remediator.definitions import DefinitionSet
from remediator.definitions.derived import derived
from remediator.engine.runtime import DefinitionsHolder
from remediator.store.repository import Repository

__all__ = ["content_hash", "persist_version", "versions_for"]


def content_hash(value: object) -> str:
    """Short SHA-256 of text, or of the canonical JSON of a value."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _names(data: object, list_key: str) -> list[str]:
    if isinstance(data, dict) and list_key in data:
        data = data[list_key]
    items = data if isinstance(data, list) else [data]
    return [str(item["name"]) for item in items if isinstance(item, dict) and isinstance(item.get("name"), str)]


@lru_cache(maxsize=32)
def _origins(sources: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], str]:
    """(kind, name) -> source file name, for rules and playbooks."""
    found: dict[tuple[str, str], str] = {}
    for name, text in sources:
        kind = "rule" if name.startswith("rules/") else "playbook" if name.startswith("playbooks/") else None
        if kind is None:
            continue
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        for item in _names(data, "rules" if kind == "rule" else "playbooks"):
            found.setdefault((kind, item), name)
    return found


def versions_for(defs: DefinitionSet, rule_name: str, playbook_name: str) -> dict[str, str | None]:
    """The versions recorded in a remediation's plan (`RemediationPlan.versions`)."""
    key = ("versions", rule_name, playbook_name)
    return dict(derived(defs, key, lambda: _versions(defs, rule_name, playbook_name)))


def _versions(defs: DefinitionSet, rule_name: str, playbook_name: str) -> dict[str, str | None]:
    origins = _origins(tuple(sorted(defs.sources.items())))
    rule = next((r for r in defs.rules if r.name == rule_name), None)
    playbook = defs.playbooks.get(playbook_name)
    rule_file = origins.get(("rule", rule_name))
    playbook_file = origins.get(("playbook", playbook_name))
    return {
        "definitions": defs.version,
        "rule": content_hash(rule.model_dump(mode="json")) if rule is not None else None,
        "rule_file": rule_file,
        "rule_file_sha": content_hash(defs.sources[rule_file]) if rule_file else None,
        "playbook": content_hash(playbook.model_dump(mode="json")) if playbook is not None else None,
        "playbook_file": playbook_file,
        "playbook_file_sha": content_hash(defs.sources[playbook_file]) if playbook_file else None,
    }


async def persist_version(repo: Repository, holder: DefinitionsHolder, defs: DefinitionSet) -> None:
    """Store the sources of `defs` once per process (and once per database: the insert is idempotent)."""
    if defs.version in holder.persisted:
        return
    await repo.save_definition_version(defs.version, dict(defs.sources))
    holder.persisted.add(defs.version)
