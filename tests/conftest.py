"""Suite-wide pytest configuration: shared fixture plugins."""

pytest_plugins = ["tests.fakekube.plugin", "tests.pgfixtures"]
