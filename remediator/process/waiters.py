"""Settling a future that a caller may have given up on: the intake writer's and the admission queue's
waiters are answered by another task, and a waiter cancelled in the meantime must not be answered twice."""

from __future__ import annotations

import asyncio
from typing import TypeVar

__all__ = ["settle"]

T = TypeVar("T")


def settle(future: asyncio.Future[T], outcome: T | BaseException) -> None:
    """Set `outcome` as the future's result, or raise it there when it is an exception; nothing if done."""
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
