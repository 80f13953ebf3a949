"""release-ledger: a release regression gate on an event-sourced ledger.

The one import name the tool installs. Its layers are the repository's top-level folders
(`domain`, `projections`, `adapters`, `ledger`, `cli`), seen here as subpackages through
relative symbolic links, so the source tree keeps the layout of DESIGN.md while the wheel
holds `release_ledger` alone (`release_ledger.domain`, ...) and collides with no project's
`domain` or `ledger`.
"""
