"""Readers for the two data files beside the rules, kept as data so SREs update facts without code.

xid-catalog.yaml holds `unknown_resolution: CONTACT_SUPPORT` and an `xids` mapping of code -> {nvidia | project,
nvidia_note, mnemonic, description, cause}: `nvidia` is the immediate action NVIDIA publishes for the code, `project`
the bucket chosen here where NVIDIA publishes none (exactly one of the two; `resolution`, the older spelling, counts
as `project`). alert-kinds.yaml maps alertname -> kind (`GPUXidError: xid`).
"""

from __future__ import annotations

from remediator.definitions.source import Document, Problems
from remediator.definitions.xid import RESOLUTIONS, UNKNOWN_RESOLUTION, XidCatalog, XidInfo
from remediator.intake.normalize import ALERT_KINDS

__all__ = ["ALERT_KINDS_FILE", "XID_CATALOG_FILE", "parse_alert_kinds", "parse_xid_catalog"]

XID_CATALOG_FILE = "xid-catalog.yaml"
ALERT_KINDS_FILE = "alert-kinds.yaml"
_BUCKET_KEYS = ("nvidia", "project", "resolution")
_ENTRY_KEYS = frozenset({*_BUCKET_KEYS, "nvidia_note", "cause", "description", "mnemonic"})


def _code(key: object) -> int | None:
    if isinstance(key, bool):
        return None
    if isinstance(key, int):
        return key if key >= 0 else None
    if isinstance(key, str) and key.strip().isdigit():
        return int(key.strip())
    return None


def parse_xid_catalog(doc: Document, problems: Problems) -> XidCatalog:
    """The catalog in `doc`; every problem is recorded and the valid entries are kept."""
    data = doc.data
    if not isinstance(data, dict):
        problems.add(doc, (), "the Xid catalog must be a mapping with an `xids` mapping")
        return XidCatalog()
    for key in data:
        if key not in ("xids", "unknown_resolution"):
            problems.add(doc, (key,), f"unknown field {key!r} (expected xids, unknown_resolution)")
    unknown = data.get("unknown_resolution", UNKNOWN_RESOLUTION)
    if unknown not in RESOLUTIONS:
        problems.add(doc, ("unknown_resolution",), f"unknown resolution bucket {unknown!r}")
        unknown = UNKNOWN_RESOLUTION
    xids = data.get("xids")
    if not isinstance(xids, dict):
        problems.add(doc, ("xids",), "`xids` must be a mapping of Xid code -> entry")
        return XidCatalog(unknown_resolution=unknown)
    entries: dict[int, XidInfo] = {}
    for key, entry in xids.items():
        path = ("xids", key)
        code = _code(key)
        if code is None:
            problems.add(doc, path, f"Xid code {key!r} is not a non-negative integer")
            continue
        if code in entries:
            problems.add(doc, path, f"Xid {code} is listed twice")
            continue
        if not isinstance(entry, dict):
            problems.add(doc, path, "an Xid entry must be a mapping with resolution, cause and description")
            continue
        for field in entry:
            if field not in _ENTRY_KEYS:
                expected = ", ".join(sorted(_ENTRY_KEYS))
                problems.add(doc, (*path, field), f"unknown field {field!r} (expected {expected})")
        given = [key for key in _BUCKET_KEYS if key in entry]
        if len(given) != 1:
            problems.add(doc, path, "an Xid entry needs exactly one of nvidia (NVIDIA's published immediate action) "
                         f"or project (the bucket chosen where NVIDIA publishes none); got {given or 'neither'}")
            continue
        bucket_key = given[0]
        resolution = entry[bucket_key]
        if resolution not in RESOLUTIONS:
            problems.add(doc, (*path, bucket_key), f"unknown resolution bucket {resolution!r}")
            continue
        texts = {f: entry.get(f, "") for f in ("cause", "description", "mnemonic", "nvidia_note")}
        bad = [f for f, v in texts.items() if not isinstance(v, str)]
        for f in bad:
            problems.add(doc, (*path, f), f"{f} must be a string")
        if bad:
            continue
        entries[code] = XidInfo(
            code=code,
            resolution=str(resolution),
            cause=texts["cause"],
            description=texts["description"],
            mnemonic=texts["mnemonic"],
            nvidia=str(resolution) if bucket_key == "nvidia" else None,
            nvidia_note=texts["nvidia_note"],
        )
    return XidCatalog(entries=entries, unknown_resolution=unknown)


def parse_alert_kinds(doc: Document, problems: Problems) -> dict[str, str]:
    """alertname -> kind from `doc`; unknown kinds are recorded as problems."""
    data = doc.data
    if data is None:
        return {}
    if not isinstance(data, dict):
        problems.add(doc, (), "alert kinds must be a mapping of alertname -> kind")
        return {}
    kinds: dict[str, str] = {}
    for name, kind in data.items():
        if kind not in ALERT_KINDS:
            expected = ", ".join(ALERT_KINDS)
            problems.add(doc, (name,), f"unknown alert kind {kind!r} (expected one of {expected})")
            continue
        kinds[str(name)] = str(kind)
    return kinds
