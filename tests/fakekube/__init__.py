"""A strict fake Kubernetes apiserver for tests (kmock's KubernetesEmulator with real-apiserver rules)."""

from tests.fakekube.server import Call, FakeKube

__all__ = ["Call", "FakeKube"]
