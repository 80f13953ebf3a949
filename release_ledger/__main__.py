"""`python -m release_ledger`: the `ledger` command without the installed console script."""

from release_ledger.cli.main import main

main()
