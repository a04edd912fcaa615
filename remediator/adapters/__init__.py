"""Adapters: the only modules that talk to Kubernetes, node sidecars and notification peers."""
