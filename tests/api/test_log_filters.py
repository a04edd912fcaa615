"""The process log drops SQLAlchemy's traceback for a cancelled connection reset, and nothing else."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator

import pytest

from remediator.process.logs import configure_logging


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    configure_logging("INFO", "text", stream=stream)
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def _raise_and_log(logger: str, exc: BaseException) -> None:
    try:
        raise exc
    except BaseException:
        logging.getLogger(logger).error("Exception during reset or similar", exc_info=True)


def test_a_cancelled_pool_reset_leaves_no_traceback(log_stream: io.StringIO) -> None:
    _raise_and_log("sqlalchemy.pool.impl.AsyncAdaptedQueuePool", asyncio.CancelledError())
    assert "Traceback" not in log_stream.getvalue()
    assert "Exception during reset" not in log_stream.getvalue()


def test_any_other_pool_error_and_a_cancellation_elsewhere_are_still_logged(log_stream: io.StringIO) -> None:
    _raise_and_log("sqlalchemy.pool.impl.AsyncAdaptedQueuePool", OSError("disk I/O error"))
    _raise_and_log("remediator.engine.worker", asyncio.CancelledError())
    text = log_stream.getvalue()
    assert text.count("Traceback") == 2
    assert "OSError: disk I/O error" in text and "CancelledError" in text
