"""Follows the kernel log (`/dev/kmsg`, or a file or FIFO standing in for it) on a background thread.

`/dev/kmsg` hands out one record per read, starting with the oldest record still in the ring buffer,
and answers EPIPE when records were overwritten before they were read (the reader goes on with the
next one). A regular file is followed like `tail -f`; a FIFO is read while a writer has it open. Lines
are cut at newlines; a line longer than `MAX_LINE` is dropped whole, up to its newline (its tail is never
read as a line of its own: it could hold a forged record), and reported to `on_oversize`. Every line
goes to `handle_line`; after
each batch (what could be read without waiting, at most `BATCH` lines) `end_batch` is called, which is
where the caller persists what it has counted.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import stat
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["MAX_LINE", "KmsgReader"]

log = logging.getLogger(__name__)

MAX_LINE = 64 * 1024
BATCH = 2000
_READ_SIZE = 16 * 1024  # larger than any kmsg record (the kernel refuses reads smaller than a record)


class KmsgReader:
    """Reads `path` until `stop()`; calls `handle_line(line)` per line and `end_batch()` per batch."""

    def __init__(
        self,
        path: Path,
        handle_line: Callable[[str], None],
        end_batch: Callable[[], None],
        *,
        on_overrun: Callable[[], None] = lambda: None,
        on_oversize: Callable[[int], None] = lambda size: None,
        poll_seconds: float = 0.2,
    ) -> None:
        self.path = path
        self._handle_line = handle_line
        self._end_batch = end_batch
        self._on_overrun = on_overrun
        self._on_oversize = on_oversize
        self._poll = poll_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.lines = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kmsg-reader", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                if self.error is None:
                    log.error("kernel log %s cannot be opened (%s); retrying", self.path, exc)
                self.error = f"cannot open {self.path}: {exc.strerror or exc}"
                self._stop.wait(max(self._poll, 1.0))
                continue
            self.error = None
            try:
                self._follow(fd)
            except Exception:  # one bad record must never end detection
                log.exception("kernel log reader failed; reopening %s", self.path)
                self._stop.wait(self._poll)
            finally:
                os.close(fd)

    def _oversize(self, seen: int) -> None:
        log.debug("kernel log line longer than %d bytes (%d read) dropped to its end", MAX_LINE, seen)
        self._on_oversize(seen)

    def _follow(self, fd: int) -> None:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        pending = b""
        discarding = False  # inside an over-long line: everything up to its newline goes
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not self._stop.is_set():
            batch = 0
            while batch < BATCH:
                try:
                    chunk = os.read(fd, _READ_SIZE)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno == errno.EPIPE:  # kmsg: records overwritten before we read them
                        self._on_overrun()
                        continue
                    if exc.errno == errno.EINTR:
                        continue
                    raise
                if not chunk:  # end of a regular file, or a FIFO without a writer: wait for more
                    break
                pending += chunk
                lines = pending.split(b"\n")
                pending = lines.pop()
                if discarding:
                    if not lines:
                        pending = b""  # still inside the over-long line
                        continue
                    lines.pop(0)  # the over-long line's tail, up to its newline
                    discarding = False
                if len(pending) > MAX_LINE:
                    self._oversize(len(pending))
                    pending = b""
                    discarding = True
                for raw in lines:
                    self.lines += 1
                    batch += 1
                    if len(raw) > MAX_LINE:
                        self._oversize(len(raw))
                        continue
                    self._handle_line(raw.decode("utf-8", errors="replace"))
            if batch:
                self._end_batch()
                if batch >= BATCH:
                    continue
            if regular:
                self._stop.wait(self._poll)
            else:
                events = poller.poll(int(self._poll * 1000))
                if events and not any(mask & select.POLLIN for _, mask in events):
                    self._stop.wait(self._poll)  # FIFO whose writer left: POLLHUP until a new one comes
