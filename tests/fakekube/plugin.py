"""pytest fixtures for the fake Kubernetes API server (filled in by tests/fakekube)."""
