"""The domain: remediation states and their transitions, guardrail facts and verdicts, and the value types
every layer shares (pure: no I/O)."""
