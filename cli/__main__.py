"""`python -m cli`: the `ledger` command without the installed console script."""

from cli.main import main

main()
