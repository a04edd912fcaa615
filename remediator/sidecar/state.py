"""The node-local state file: power limits in force before the sidecar first changed them, and more.

A restore must put back the limit an operator (or the default) had set, even if the sidecar restarted
in between, so the original is written to disk before the first change and removed after the restore.
Writes are atomic (temp file in the same directory, fsync, rename, fsync of the directory): a crash
leaves either the old or the new file, never half of one. Each user owns one top-level key and
`update_state` rewrites only that key, so the GPU-error detector can keep its records in the same file.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from remediator.sidecar.problems import Problem

__all__ = ["PowerStateStore", "read_state", "update_state"]

# One lock for every read-modify-write of a state file: the power-limit records and the detector's
# records (`detector_state.py`) share the file, written from different threads.
_LOCK = threading.RLock()


class PowerStateStore:
    """GPU UUID -> original power limit in milliwatts, kept in one small JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, int]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise Problem(500, f"power-limit state file {self.path} is unreadable: {exc}") from exc
        originals = raw.get("original_power_limit_mw", {}) if isinstance(raw, dict) else None
        if not isinstance(originals, dict):
            raise Problem(500, f"power-limit state file {self.path} has an unexpected shape")
        return {str(k): int(v) for k, v in originals.items()}

    def original_mw(self, uuid: str) -> int | None:
        return self.load().get(uuid)

    def remember(self, uuid: str, milliwatts: int) -> None:
        """Record the original limit unless one is already recorded (the first change wins)."""
        originals = self.load()
        if uuid not in originals:
            originals[uuid] = milliwatts
            self._write(originals)

    def forget(self, uuid: str) -> None:
        originals = self.load()
        if originals.pop(uuid, None) is not None:
            self._write(originals)

    def _write(self, originals: dict[str, int]) -> None:
        update_state(self.path, "original_power_limit_mw", originals)


def read_state(path: Path) -> dict[str, Any]:
    """The whole state file as a dict ({} when it does not exist)."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise Problem(500, f"state file {path} is unreadable: {exc}") from exc
    if not isinstance(raw, dict):
        raise Problem(500, f"state file {path} has an unexpected shape")
    return raw


def update_state(path: Path, key: str, value: Any) -> None:
    """Replace one top-level key of the state file atomically, keeping every other key as it is."""
    with _LOCK:
        doc = read_state(path)
        doc[key] = value
        _write_atomic(path, doc)


def _write_atomic(path: Path, doc: dict[str, Any]) -> None:
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(doc, fh, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise Problem(500, f"cannot write state file {path}: {exc}") from exc
