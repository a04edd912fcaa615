"""The command line: `remediator ...` and the operator client of a running controller."""
