"""The second Xid source: an NVML event set registered for `XidCriticalError`, waited on by a thread.

`nvmlEventSetWait` blocks, so it runs on its own thread (NVML itself is thread-safe; the sidecar's single
NVML worker exists to serialise requests, not because NVML needs it) with a short timeout so `stop()`
takes effect quickly. Registering for events changes nothing on a GPU. A driver or GPU without event
support leaves the kernel log as the only source; the thread then ends and says so once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from remediator.sidecar import nvml as nv
from remediator.sidecar.nvml import DeviceHandle, Nvml, NvmlError, XidNotice

__all__ = ["NvmlXidWatcher"]

log = logging.getLogger(__name__)


def _quiet(function: str, seconds: float, code: int | None) -> None:
    return None


class NvmlXidWatcher:
    """Delivers each Xid NVML reports to `handle` until `stop()`."""

    def __init__(
        self,
        handle: Callable[[XidNotice], None],
        *,
        nvml: Nvml | None = None,
        timeout_ms: int = 500,
        retry_seconds: float = 30.0,
    ) -> None:
        self._handle = handle
        self._nvml = nvml or Nvml(observer=_quiet)
        self._timeout_ms = timeout_ms
        self._retry = retry_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.registered = 0
        self.error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nvml-xid-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.registered > 0

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self._watch()
                    return
                except NvmlError as exc:
                    self.registered = 0
                    self.error = str(exc)
                    if exc.code in (nv.NOT_SUPPORTED, nv.FUNCTION_NOT_FOUND):
                        log.info("NVML Xid events not supported (%s): the kernel log is the only Xid source", exc)
                        return
                    log.warning("NVML Xid events unavailable (%s); retrying in %.0f s", exc, self._retry)
                    self._stop.wait(self._retry)
        finally:
            try:
                self._nvml.shutdown()
            except NvmlError as exc:
                log.debug("NVML shutdown of the event thread: %s", exc)

    def _watch(self) -> None:
        self._nvml.init()
        handles = [DeviceHandle(self._nvml.handle_by_index(i)) for i in range(self._nvml.device_count())]
        event_set, self.registered = self._nvml.xid_event_set(handles)
        try:
            if not self.registered:
                raise NvmlError(nv.NOT_SUPPORTED, "nvmlDeviceRegisterEvents")
            self.error = None
            log.info("NVML Xid events registered on %d GPU(s)", self.registered)
            while not self._stop.is_set():
                notice = self._nvml.wait_xid(event_set, self._timeout_ms)
                if notice is not None:
                    self._handle(notice)
        finally:
            self._nvml.free_event_set(event_set)
