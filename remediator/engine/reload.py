"""Hot reload of rules and playbooks: on file change, on SIGHUP and on `POST /api/v1/definitions/reload`.

The watcher needs no extra dependency: every `definitions_watch_interval` it compares a cheap signature
of the definition directories (file names, sizes, mtimes, and where a Kubernetes ConfigMap mount's
`..data` symlink points, which the kubelet swaps atomically) and, when that moved, a hash of the files'
contents, so touching a file without changing it does nothing. A new set is loaded and checked whole; a
set with any problem is refused and the old one stays in force, with the problems (file:line) kept for
`GET /api/v1/definitions`, the UI, the log and the `remediator_definitions_last_reload_*` metrics.
Remediations keep the playbook snapshot they started with, so a reload never changes one in flight.
Loading runs on a worker thread, never on the event loop, and is bounded by `definitions_load_timeout`: a
load that takes longer is refused (the set in force stays, the lock is released), and no second load starts
while an abandoned one is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from remediator.definitions import DefinitionSet
from remediator.engine.bootstrap import load_defs
from remediator.engine.runtime import ReloadOutcome, Runtime
from remediator.engine.versions import persist_version
from remediator.errors import DefinitionError, DefinitionSetError, RemediatorError, StoreUnavailable

__all__ = ["DefinitionsReloader", "directory_digest", "directory_signature"]

log = logging.getLogger(__name__)

_SUFFIXES = (".yaml", ".yml")
Signature = tuple[tuple[str, str, tuple[tuple[str, int, int, str], ...]], ...]


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.suffix in _SUFFIXES and p.is_file())
    except OSError:
        return []


def directory_signature(directories: list[Path]) -> Signature:
    """Names, sizes, mtimes and symlink targets: changes whenever a file is written or a mount is swapped."""
    out = []
    for directory in directories:
        data_link = directory / "..data"
        target = os.path.realpath(data_link) if data_link.is_symlink() else ""
        files = []
        for path in _entries(directory):
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((path.name, st.st_mtime_ns, st.st_size, os.path.realpath(path)))
        out.append((str(directory), target, tuple(files)))
    return tuple(out)


def directory_digest(directories: list[Path]) -> str:
    """Hash of the definition files' names and contents (what a reload would read)."""
    digest = hashlib.sha256()
    for directory in directories:
        digest.update(str(directory).encode() + b"\0")
        for path in _entries(directory):
            digest.update(path.name.encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError as exc:
                digest.update(f"unreadable: {exc}".encode())
            digest.update(b"\0")
    return digest.hexdigest()


class _LoadTooSlow(RemediatorError):
    """A load that ran past the time limit."""


class DefinitionsReloader:
    """Loads, checks and swaps definition sets for one runtime; serialises concurrent reload requests."""

    def __init__(self, rt: Runtime, *, load: Callable[[], DefinitionSet] | None = None) -> None:
        self.rt = rt
        self._load = load or self._load_from_settings
        self._lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[ReloadOutcome]] = set()
        self._signature: Signature | None = None
        self._digest: str | None = None
        self._loading: asyncio.Future[DefinitionSet] | None = None
        rt.definitions.keep = rt.settings.definitions_history

    @property
    def directories(self) -> list[Path]:
        return [Path(self.rt.settings.rules_dir), Path(self.rt.settings.playbooks_dir)]

    @property
    def watching(self) -> bool:
        return self._watcher is not None and not self._watcher.done()

    def _load_from_settings(self) -> DefinitionSet:
        return load_defs(self.rt.settings, dict(self.rt.actions))

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self, *, watch: bool = True) -> None:
        """Take the files as they are now as the baseline; watch them when the interval is not zero."""
        self._signature = await asyncio.to_thread(directory_signature, self.directories)
        self._digest = await asyncio.to_thread(directory_digest, self.directories)
        metrics = self.rt.metrics
        metrics.reload_success.set(1)
        metrics.reload_timestamp.set(self.rt.definitions.loaded_at[self.rt.definitions.current.version].timestamp())
        await self._persist()
        interval = self.rt.settings.definitions_watch_interval.total_seconds()
        if watch and interval > 0:
            self._watcher = asyncio.create_task(self._watch(interval), name="remediator-definitions-watch")
            log.info(
                "watching %s for definition changes every %gs",
                ", ".join(str(d) for d in self.directories), interval,
            )

    async def stop(self) -> None:
        tasks = [t for t in (self._watcher, *self._requests) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._watcher = None
        self._requests.clear()

    def request(self, trigger: str) -> None:
        """Schedule a reload from a context that cannot await (a signal handler)."""
        task = asyncio.create_task(self.reload(trigger), name=f"remediator-definitions-reload-{trigger}")
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    # -- watching ---------------------------------------------------------------------------------

    async def _watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.check()
            # broad: the watcher must outlive any one tick's failure (file system, parsing, a bug); logged with its
            # traceback
            except Exception:
                log.exception("definitions watcher iteration failed")

    async def check(self) -> ReloadOutcome | None:
        """One watcher tick: reload when the files' contents differ from the last ones read."""
        signature = await asyncio.to_thread(directory_signature, self.directories)
        if signature == self._signature:
            return None
        self._signature = signature
        digest = await asyncio.to_thread(directory_digest, self.directories)
        if digest == self._digest:
            return None
        return await self.reload("watch")

    # -- reloading --------------------------------------------------------------------------------

    async def reload(self, trigger: str) -> ReloadOutcome:
        """Load and check the whole set; put it in force only when it has no problem."""
        async with self._lock:
            digest = await asyncio.to_thread(directory_digest, self.directories)
            holder = self.rt.definitions
            before = holder.current.version
            try:
                new = await self._load_within_limit()
            except _LoadTooSlow as exc:
                outcome = holder.refuse([DefinitionError("<definitions>", 0, str(exc))], trigger=trigger)
            except DefinitionSetError as exc:
                outcome = holder.refuse(exc.errors, trigger=trigger)
            except (OSError, ValueError) as exc:
                outcome = holder.refuse([DefinitionError("<definitions>", 0, f"cannot load: {exc}")], trigger=trigger)
            else:
                outcome = holder.replace(new, trigger=trigger)
            self._digest = digest
            self.rt.metrics.reload_success.set(1 if outcome.ok else 0)
            self.rt.metrics.reload_timestamp.set(outcome.at.timestamp())
            await self._report(outcome, before)
            return outcome

    async def _load_within_limit(self) -> DefinitionSet:
        """Load on a worker thread; give up waiting after `definitions_load_timeout`."""
        if self._loading is not None and not self._loading.done():
            raise _LoadTooSlow("an earlier load that ran out of time is still running; try again later")
        limit = self.rt.settings.definitions_load_timeout.total_seconds()
        loading = asyncio.get_running_loop().run_in_executor(None, self._load)
        loading.add_done_callback(lambda f: f.cancelled() or f.exception())  # an abandoned load's error
        self._loading = loading
        try:
            return await asyncio.wait_for(asyncio.shield(loading), limit)
        except TimeoutError:
            raise _LoadTooSlow(f"loading the definitions took longer than {limit:g}s; refused") from None

    async def _report(self, outcome: ReloadOutcome, before: str) -> None:
        if not outcome.ok:
            log.error(
                "definitions reload (%s) refused; version %s stays in force:\n%s",
                outcome.trigger, outcome.version, "\n".join(e.render() for e in outcome.errors),
            )
            await self._audit(
                "definitions.reload_refused",
                {"trigger": outcome.trigger, "version": outcome.version,
                 "errors": [e.render() for e in outcome.errors[:50]]},
            )
            return
        if not outcome.changed:
            log.info("definitions reload (%s): no change, version %s", outcome.trigger, outcome.version)
            return
        log.info("definitions reloaded (%s): version %s -> %s", outcome.trigger, before, outcome.version)
        await self._persist()
        await self._audit(
            "definitions.reloaded", {"trigger": outcome.trigger, "from": before, "to": outcome.version}
        )

    async def _persist(self) -> None:
        try:
            await persist_version(self.rt.repo, self.rt.definitions, self.rt.definitions.current)
        except StoreUnavailable as exc:
            log.warning("could not store definitions version %s yet: %s", self.rt.definitions.current.version, exc)

    async def _audit(self, kind: str, data: dict[str, object]) -> None:
        try:
            await self.rt.repo.record_audit(kind, actor="controller", data=dict(data))
        except StoreUnavailable as exc:
            log.warning("could not audit %s: %s", kind, exc)
