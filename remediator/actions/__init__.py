"""Remediation actions: one module per family; each action is idempotent and records what it changed."""
