"""One module per resource of the HTTP API."""
