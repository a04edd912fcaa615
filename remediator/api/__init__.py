"""HTTP surface of the controller: webhook intake, remediation API, approvals, UI and health."""
