"""Generated gRPC bindings for the kubelet PodResources v1 API (see api.proto and docs/sidecar.md)."""
