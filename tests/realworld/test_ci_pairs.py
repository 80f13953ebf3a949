"""The gate against the project's own CI on real release pairs (issue 37, part 8).

The two fastest pairs of `tests/realworld/ci_pairs.py` (the whole corpus runs with
`python bench/ci_pairs.py`): the gate must give the verdict the project's own CI command gave
(`EXPECTED`, measured with tox, not reconstructed here): passed on the unchanged pair, and
failed with exactly the tests CI fails under the one-line bug at head.

- glom: tox runs `pytest --doctest-modules {envsitepackagesdir}/glom` with `changedir = .tox`:
  the tests and the doctests of the *installed* package (glom/test/ lives inside it); the bug
  breaks a doctest (`glom/core.py::glom.core.format_invocation`) and five tests.
- structlog: tox's `3.11-tests` environment, a factor of `3.1{0-5}-tests`, whose
  `dependency_groups = tests: tests` applies only under the `tests` factor (freezegun,
  pretend, pytest-asyncio come from it).

A few minutes each on a loaded 2-core machine: opt-in (`LEDGER_TEST_REALWORLD_ALL=1`), like
the other slow real projects.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gatekit import gate
from tests.realworld.ci_pairs import expected_introduced, normalized, pair_named
from tests.realworld.sdists import mutate, release_pair

pytestmark = [
    pytest.mark.slow,
    pytest.mark.realworld,
    pytest.mark.skipif(
        not os.environ.get("LEDGER_TEST_REALWORLD_ALL"),
        reason="kept out of CI for time; set LEDGER_TEST_REALWORLD_ALL=1 to run it",
    ),
]


@pytest.mark.parametrize("mutant", [False, True], ids=["release", "bug-at-head"])
@pytest.mark.parametrize("name", ["glom", "structlog"])
def test_the_gate_gives_the_verdict_of_the_projects_own_ci(
    tmp_path: Path, name: str, mutant: bool
) -> None:
    pair = pair_named(name)
    wanted = expected_introduced(pair, mutant)
    assert wanted is not None, f"{name}: no CI measurement recorded"
    assert bool(wanted) == mutant, "CI fails exactly the mutant"
    repo = release_pair(tmp_path, pair.name, pair.base, pair.head)
    if mutant:
        mutate(repo, pair.mutation.path, pair.mutation.old, pair.mutation.new)
    result = gate(tmp_path, repo, "--shards", "2", base=f"v{pair.base}")
    document = result.document
    assert document["status"] == ("failed" if mutant else "passed"), (
        document["reasons"],
        document["unmeasured"],
        document["introduced"],
    )
    assert {normalized(test) for test in document["introduced"]} == wanted
