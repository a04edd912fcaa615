"""The node agent (`remediator sidecar`): NVML inventory, power limits and resets, GPU -> pod mapping.

Runs as a DaemonSet on GPU nodes; the controller reaches it over HTTP through
remediator.adapters.sidecar.SidecarClient. See docs/sidecar.md.
"""
