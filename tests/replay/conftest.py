"""Replay tests use the plan-only controller fixture of the reload tests."""

from tests.reload.conftest import make_controller

__all__ = ["make_controller"]
