"""The node-local state file: power limits in force before the sidecar first changed them, and more.

A restore must put back the limit an operator (or the default) had set, even if the sidecar restarted
in between, so the original is written to disk before the first change and removed after the restore.
Beside it the file keeps the limit the sidecar itself set last (read back from NVML), so a restore can
tell whether someone else changed the limit since and leave their value alone.
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

from remediator.domain.json_values import JsonObject, JsonValue
from remediator.sidecar.problems import Problem

__all__ = ["PowerStateStore", "read_state", "update_state"]

# One lock for every read-modify-write of a state file: the power-limit records and the detector's
# records (`detector_state.py`) share the file, written from different threads.
_LOCK = threading.RLock()


ORIGINALS = "original_power_limit_mw"
SET_BY_SIDECAR = "set_power_limit_mw"


class PowerStateStore:
    """GPU UUID -> original power limit, and the limit the sidecar set, in milliwatts, in one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load_all(self) -> dict[str, dict[str, int]]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {ORIGINALS: {}, SET_BY_SIDECAR: {}}
        except (OSError, ValueError) as exc:
            raise Problem(500, f"power-limit state file {self.path} is unreadable: {exc}") from exc
        maps: dict[str, dict[str, int]] = {}
        for section in (ORIGINALS, SET_BY_SIDECAR):
            entries = raw.get(section, {}) if isinstance(raw, dict) else None
            if not isinstance(entries, dict):
                raise Problem(500, f"power-limit state file {self.path} has an unexpected shape")
            maps[section] = {str(k): int(v) for k, v in entries.items()}
        return maps

    def load(self) -> dict[str, int]:
        return self._load_all()[ORIGINALS]

    def original_mw(self, uuid: str) -> int | None:
        return self.load().get(uuid)

    def set_mw(self, uuid: str) -> int | None:
        """The limit the sidecar itself set last on this GPU (None: never, or a file from before it was kept)."""
        return self._load_all()[SET_BY_SIDECAR].get(uuid)

    def remember(self, uuid: str, milliwatts: int) -> None:
        """Record the original limit unless one is already recorded (the first change wins)."""
        maps = self._load_all()
        if uuid not in maps[ORIGINALS]:
            maps[ORIGINALS][uuid] = milliwatts
            self._write_all(maps)

    def remember_change(self, uuid: str, original_mw: int, target_mw: int) -> None:
        """Before a change, in one write: the original (the first change wins) and the limit about to be
        set (the last change wins)."""
        maps = self._load_all()
        maps[ORIGINALS].setdefault(uuid, original_mw)
        maps[SET_BY_SIDECAR][uuid] = target_mw
        self._write_all(maps)

    def remember_set(self, uuid: str, milliwatts: int | None) -> None:
        """Record the limit the sidecar set (None: forget it, e.g. after a failed change)."""
        maps = self._load_all()
        if maps[SET_BY_SIDECAR].get(uuid) == milliwatts:
            return
        if milliwatts is None:
            maps[SET_BY_SIDECAR].pop(uuid, None)
        else:
            maps[SET_BY_SIDECAR][uuid] = milliwatts
        self._write_all(maps)

    def forget(self, uuid: str) -> None:
        maps = self._load_all()
        dropped = [maps[section].pop(uuid, None) for section in (ORIGINALS, SET_BY_SIDECAR)]
        if any(value is not None for value in dropped):
            self._write_all(maps)

    def _write_all(self, maps: dict[str, dict[str, int]]) -> None:
        """Rewrite the power-limit sections only; every other user's key stays as it is."""
        with _LOCK:
            doc = read_state(self.path)
            for section, values in maps.items():
                doc[section] = {**values}
            _write_atomic(self.path, doc)


def read_state(path: Path) -> JsonObject:
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


def update_state(path: Path, key: str, value: JsonValue) -> None:
    """Replace one top-level key of the state file atomically, keeping every other key as it is."""
    with _LOCK:
        doc = read_state(path)
        doc[key] = value
        _write_atomic(path, doc)


def _write_atomic(path: Path, doc: JsonObject) -> None:
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
        # broad: BaseException so the temporary file is removed whatever interrupted the write; re-raised
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
