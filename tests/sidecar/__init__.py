"""Tests of the node sidecar, its HTTP client and the GPU actions."""
