"""The engine tests' cluster fixture, for the storm tests."""

from tests.engine.conftest import make_cluster

__all__ = ["make_cluster"]
