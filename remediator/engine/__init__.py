"""The remediation engine: state table, guardrail decisions, step execution and the async worker."""
