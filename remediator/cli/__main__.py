"""`python -m remediator.cli`: the same entry point as the `remediator` command."""

from remediator.cli.main import main

main()
