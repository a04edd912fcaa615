"""Durable state: alerts as received, remediations and their steps, and the hash-chained audit log."""
