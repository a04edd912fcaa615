"""The worker in a process of its own: `remediator serve` on a SQLite file (its default; REMEDIATOR_WORKER_PROCESS).

CPython runs one thread of Python code at a time, so with the worker on the web server's event loop a
flood's decisions and its webhooks share one core: every webhook that arrives during a decision batch waits
for it (docs/PERFORMANCE.md, "Webhook ingest"). SQLite allows one controller, so more replicas are no way
out; a second process is. The web process keeps the API, the UI and the webhook intake; this process runs
the `Worker` (alert decisions, remediations, the node inventory watch, audit housekeeping) on the same
database file. SQLite's write lock arbitrates between them, and the intake's commit lane goes first
(`store/sqlite_intake.py`).

The two talk over a socket pair, one JSON object a line:

    web -> worker:  {"settings": "<pickled Settings>"} (first), {"wake": "alerts" | "any"}, {"metrics": n},
                    {"reload": "sighup"}, {"stop": true}
    worker -> web:  {"ready": true}, {"gpu_nodes": n, "nodes": {name: facts}}, {"metrics": n, "text": "..."}

Ownership: the web process takes the single-replica guard (a flock) before it starts this process and
passes the locked descriptor on, so the guard is held until both have exited; a controller started after
a crash cannot run beside a worker that outlived its web process. This process stops when the socket closes
(its web process is gone), when told to, or on SIGTERM (SIGINT is left to the web process). The web process
stops serving when this process exits (`on_exit`), so Kubernetes restarts the pod instead of leaving a
controller that stores and never decides.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from prometheus_client import generate_latest

from remediator.engine.bootstrap import build_runtime, close_runtime
from remediator.engine.reload import DefinitionsReloader
from remediator.engine.runtime import Runtime
from remediator.engine.worker import Worker
from remediator.errors import StoreUnavailable, WorkerProcessFailed
from remediator.kube.inventory import NodeFacts, NodeInventory
from remediator.process.gc_freeze import freeze_startup_objects
from remediator.process.logs import configure_logging
from remediator.settings import Settings
from remediator.store import replica_guard
from remediator.store.availability import is_database_error

__all__ = ["WorkerProcess", "main"]

log = logging.getLogger(__name__)

LINK_FD_ENV = "REMEDIATOR_WORKER_LINK_FD"
GUARD_FD_ENV = "REMEDIATOR_WORKER_GUARD_FD"
START_TIMEOUT_S = 120.0  # migrations are done by then; this covers imports, definitions and the first inventory
STOP_TIMEOUT_S = 30.0
METRICS_TIMEOUT_S = 5.0
_LINE_LIMIT = 64 * 1024 * 1024  # a metrics answer is one line
_INVENTORY_EVERY_S = 1.0


def _pack(settings: Settings) -> str:
    """The web process's settings exactly as it resolved them (config file, environment, replica id)."""
    return base64.b64encode(pickle.dumps(settings)).decode()


def _unpack(packed: str) -> Settings:
    # Only the web process that started this one holds the other end of the socket pair.
    settings = pickle.loads(base64.b64decode(packed))  # noqa: S301
    if not isinstance(settings, Settings):
        raise TypeError(f"expected Settings from the web process, got {type(settings).__name__}")
    return settings


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class WorkerProcess:
    """The web process's end: starts the worker process, wakes it, asks it for its metrics, stops it.

    Has the `wake` the API calls after storing alerts or decisions (`engine.worker.Wakes`).
    """

    def __init__(self, rt: Runtime, *, on_exit: Callable[[str], None] | None = None) -> None:
        self.rt = rt
        self.on_exit = on_exit
        self.proc: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._wake_alerts = False
        self._wake_any = False
        self._flush_scheduled = False
        self._asked = 0
        self._answers: dict[int, asyncio.Future[str]] = {}
        self._stopping = False

    async def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the process and wait until its worker runs; WorkerProcessFailed says why it did not."""
        settings = self.rt.settings
        guard = replica_guard.held(settings.database_url)
        guard_fd = guard.inheritable_fd if guard is not None else None
        ours, theirs = socket.socketpair()
        # Every guard descriptor travels (the lock file's and the database file's flock); the child adopts the
        # first and keeps the others open for its lifetime.
        passed = [theirs.fileno(), *(guard.inheritable_fds if guard is not None else ())]
        env = {**os.environ, LINK_FD_ENV: str(theirs.fileno()), GUARD_FD_ENV: "" if guard_fd is None else str(guard_fd)}
        try:
            self.proc = await asyncio.to_thread(
                subprocess.Popen, [sys.executable, "-m", "remediator.engine.worker_process"], pass_fds=passed,
                env=env,
            )
        finally:
            theirs.close()
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        reader, self._writer = await asyncio.open_unix_connection(sock=ours, limit=_LINE_LIMIT)
        self._writer.write(_line({"settings": _pack(settings)}))
        self._reader_task = asyncio.create_task(self._read(reader), name="remediator-worker-link")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            await self.stop()
            raise WorkerProcessFailed(f"the worker process did not start within {timeout:.0f} s") from None
        log.info("worker process started (pid %d)", self.proc.pid)

    def wake(self, *, alerts: bool = False) -> None:
        """Ask the worker to run now; wakes within one turn of the event loop travel as one message."""
        if alerts:
            self._wake_alerts = True
        else:
            self._wake_any = True
        if not self._flush_scheduled and self._writer is not None:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_wakes)

    def _flush_wakes(self) -> None:
        self._flush_scheduled = False
        if self._writer is None or self._writer.is_closing():
            return
        if self._wake_alerts:
            self._writer.write(_line({"wake": "alerts"}))
        elif self._wake_any:
            self._writer.write(_line({"wake": "any"}))
        self._wake_alerts = self._wake_any = False

    def reload(self) -> None:
        """Pass a SIGHUP on: the worker reloads its definitions too."""
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(_line({"reload": "sighup"}))

    async def metrics_text(self, timeout: float = METRICS_TIMEOUT_S) -> str | None:
        """The worker's own /metrics exposition, or None when it does not answer in time."""
        if self._writer is None or self._writer.is_closing():
            return None
        self._asked += 1
        ask = self._asked
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._answers[ask] = answer
        self._writer.write(_line({"metrics": ask}))
        try:
            return await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            return None
        finally:
            self._answers.pop(ask, None)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self._ready is not None and self._ready.done()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                message = json.loads(line)
                if "ready" in message and self._ready is not None and not self._ready.done():
                    self._ready.set_result(None)
                elif "gpu_nodes" in message:
                    self.rt.gpu_nodes = int(message["gpu_nodes"])
                    if isinstance(message.get("nodes"), dict):
                        inventory = NodeInventory()
                        inventory.replace_facts(
                            {str(k): NodeFacts.from_list(v) for k, v in message["nodes"].items()}, ""
                        )
                        self.rt.inventory = inventory
                elif "metrics" in message:
                    answer = self._answers.get(int(message["metrics"]))
                    if answer is not None and not answer.done():
                        answer.set_result(str(message["text"]))
        except ConnectionError:
            pass  # the process is gone: its exit code below says more
        except ValueError as exc:
            log.error("the worker process sent what is not a JSON line (%s): it is stopped", exc)
            if self.proc is not None:
                self.proc.kill()
        code = await asyncio.to_thread(self.proc.wait) if self.proc is not None else None
        why = f"the worker process exited with code {code}"
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(WorkerProcessFailed(why + " before it started"))
            return
        if not self._stopping:
            log.error("%s: this controller stops (its alerts would be stored and never decided)", why)
            if self.on_exit is not None:
                self.on_exit(why)

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Ask the worker to finish its steps and exit; kill it after `timeout`."""
        self._stopping = True
        if self._writer is not None and not self._writer.is_closing():
            with contextlib.suppress(ConnectionError):
                self._writer.write(_line({"stop": True}))
                await self._writer.drain()
        if self.proc is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout)
            except TimeoutError:
                log.error("the worker process did not stop within %.0f s: killed", timeout)
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await self._reader_task


async def _serve_link(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The worker process's life, once its settings have arrived. A store that fails before the worker runs
    (a full disk, an unreadable file) is one ERROR line and exit code 1, not a traceback; the web process then
    stops with its own line (exit 8)."""
    started: list[bool] = []
    try:
        await _run_worker(reader, writer, started)
    except Exception as exc:  # broad: a store that failed before the worker ran ends it with one line; others go on
        if started or not (isinstance(exc, OSError | StoreUnavailable) or is_database_error(exc)):
            raise
        text = str(getattr(exc, "orig", None) or exc).strip()
        log.error("the worker process could not start: %s", text.splitlines()[0] if text else type(exc).__name__)
        raise SystemExit(1) from None


async def _run_worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, started: list[bool]) -> None:
    first = json.loads(await reader.readline())
    settings = _unpack(first["settings"])
    configure_logging(settings.log_level, settings.log_format)
    guard_fd = os.environ.pop(GUARD_FD_ENV, "")
    if guard_fd:
        replica_guard.adopt(settings.database_url, replica_guard.InheritedGuard(int(guard_fd), "file lock"))
    rt, engine = await build_runtime(settings, migrate=False)
    worker = Worker(rt)
    reloader = DefinitionsReloader(rt)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    # Ctrl-C in a terminal reaches both processes: the web process stops this one (its "stop"), so that a
    # stop it asked for is not taken for a worker that died.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    loop.add_signal_handler(signal.SIGHUP, reloader.request, "sighup")
    try:
        await reloader.start(watch=True)
        await worker.start()
        freeze_startup_objects()
        writer.write(_line({"ready": True, "pid": os.getpid()}))
        started.append(True)
        inventory = asyncio.create_task(_send_inventory(rt, writer))
        listen = asyncio.create_task(_listen(reader, writer, rt, worker, reloader))
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({listen, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in (inventory, listen, stopped):
            task.cancel()
    finally:
        await reloader.stop()
        await worker.stop()
        await rt.repo.close()
        await close_runtime(rt, engine)


async def _listen(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rt: Runtime, worker: Worker,
    reloader: DefinitionsReloader,
) -> None:
    """Until the web process says stop or is gone (end of the stream)."""
    while line := await reader.readline():
        message = json.loads(line)
        if "wake" in message:
            worker.wake(alerts=message["wake"] == "alerts")
        elif "metrics" in message:
            text = generate_latest(rt.metrics.registry).decode()
            writer.write(_line({"metrics": message["metrics"], "text": text}))
        elif "reload" in message:
            reloader.request(str(message["reload"]))
        elif message.get("stop"):
            return


async def _send_inventory(rt: Runtime, writer: asyncio.StreamWriter) -> None:
    """The GPU node count and the node facts the web process shows (guardrail status, fleet page), whenever
    they change (at most once a second)."""
    sent: tuple[int, int] | None = None
    while True:
        inventory = rt.inventory
        now = (rt.gpu_nodes, inventory.version if inventory is not None else -1)
        if now != sent:
            sent = now
            message: dict[str, Any] = {"gpu_nodes": rt.gpu_nodes}
            if inventory is not None:
                message["nodes"] = inventory.as_dict()
            writer.write(_line(message))
        await asyncio.sleep(_INVENTORY_EVERY_S)


async def _child(link: socket.socket) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=link, limit=_LINE_LIMIT)
    try:
        await _serve_link(reader, writer)
    finally:
        writer.close()


def main() -> None:
    """Entry point of the worker process (`python -m remediator.engine.worker_process`, started by serve)."""
    fd = os.environ.pop(LINK_FD_ENV, "")
    if not fd:
        sys.exit("this module is started by `remediator serve` (its worker process on a SQLite file)")
    import uvloop

    uvloop.run(_child(socket.socket(fileno=int(fd))))


if __name__ == "__main__":
    main()
