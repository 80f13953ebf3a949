"""Aggregation rules: named, versioned, pure functions from a run's state to a verdict.

Adding a rule: write one small module here with `NAME`, `VERSION`, `DESCRIPTION` and
`decide(state) -> Verdict`, then add it to `REGISTRY` below (one line).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from release_ledger.domain.errors import BadInput
from release_ledger.domain.rules import code_only, default, strict, zero_failures

if TYPE_CHECKING:  # naming a rule (its version for the run list) needs no fold
    from release_ledger.domain.run_state import RunState
    from release_ledger.domain.verdict import Verdict


@dataclass(frozen=True)
class Rule:
    name: str
    version: int
    description: str
    decide: Callable[[RunState], Verdict]


def _rule(module: ModuleType) -> Rule:
    return Rule(module.NAME, module.VERSION, module.DESCRIPTION, module.decide)


REGISTRY: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        _rule(strict),
        _rule(default),
        _rule(zero_failures),
        _rule(code_only),
    )
}


def verdict_under(state: RunState, rule: str | None = None) -> Verdict:
    """The run's verdict under `rule`, or under the rule it was started with."""
    name = rule or (state.started.rule if state.started else "default")
    return get_rule(name).decide(state)


def get_rule(name: str) -> Rule:
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise BadInput(f"unknown rule {name!r}; known rules: {known}") from None
