"""Alertmanager intake: the webhook payload models and their normalisation into GpuAlert (pure)."""
