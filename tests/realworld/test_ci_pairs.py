"""The gate against the project's own CI on real release pairs (issue 37, part 8).

Pairs of `tests/realworld/ci_pairs.py` (the whole corpus runs with `python bench/ci_pairs.py`):
the gate must give the verdict the project's own CI command gave (`EXPECTED`, measured with
tox, not reconstructed here): passed on the unchanged pair, and failed with exactly the tests
CI fails at head and not at base, under the one-line bug at head.

- python-slugify 8.0.4 -> 9.0.0 (in CI, ~30 s a gate): a unittest suite in `test.py`, named
  by tox's `{posargs:test.py test_release.py}` default; 8.0.4's sdist holds no tests, so every
  test is new at head.
- svcs 26.1.0 -> 26.2.0 (in CI, ~35 s a gate): tox `3.11-tests`, a factor environment with a
  factor-conditional dependency group, run by tox-uv's lock runner; a hatch-vcs version.
- structlog 25.5.0 -> 26.1.0 (opt-in, ~50 s a gate): tox's `3.11-tests` of `3.1{0-5}-tests`,
  `dependency_groups = tests: tests` under the `tests` factor only.
- glom 24.11.0 -> 25.12.0 (opt-in, ~100 s a gate): tox runs `pytest --doctest-modules
  {envsitepackagesdir}/glom` with `changedir = .tox`, the tests and doctests of the
  *installed* package; the bug breaks a doctest (`glom/core.py::glom.core.format_invocation`)
  and five tests; the gate names the installed modules `{site-packages}/glom/...` at both
  revisions.

- nbstripout 0.9.0 -> 0.9.1 (opt-in, ~1-2 min a gate): tests run the `nbstripout` console
  script in a bash subshell; the bug breaks `-t`, so four of them fail at head only (on main at
  92ec41d the gate's console script failed at both revisions: classed preexisting). The sdist
  leaves out `tests/e2e_notebooks`, so CI itself fails 111 tests at base and 113 at head: two
  *new* tests fail at head, and the unchanged pair is `failed` with those two, as CI says.

- mkdocs 1.6.0 -> 1.6.1 (opt-in, ~1.5 min a gate): a hatch `test` environment whose script
  runs `python -m unittest discover -s mkdocs -p "*tests.py"`; hatch needs environment plugins
  the gate does not install, so the environment is read from the tables as written.

- pyproject-api 1.12.0 -> 1.12.1 (opt-in, ~1 min a gate): tox `3.11` of a `tox.toml` that
  `requires` tox-uv, whose `{posargs:...}` default gives pytest-cov a fail-under of 100 and
  report paths in tox's work_dir: read by tox (before the gate had tox-uv it fell back to the
  dependency group), the paths recorded relative to the checkout, and coverage off in shards.

Opt-in ones run with `LEDGER_TEST_REALWORLD_ALL=1`, like the other slow real projects.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gatekit import gate
from tests.realworld.ci_pairs import expected_introduced, normalized, pair_named
from tests.realworld.sdists import mutate, release_pair

pytestmark = [pytest.mark.slow, pytest.mark.realworld]

opt_in = pytest.mark.skipif(
    not os.environ.get("LEDGER_TEST_REALWORLD_ALL"),
    reason="kept out of CI for time; set LEDGER_TEST_REALWORLD_ALL=1 to run it",
)


@pytest.mark.parametrize(
    ("name", "mutant"),
    [
        ("python-slugify", False),
        ("python-slugify", True),
        ("svcs", False),
        ("svcs", True),
        pytest.param("structlog", False, marks=opt_in),
        pytest.param("structlog", True, marks=opt_in),
        pytest.param("glom", False, marks=opt_in),
        pytest.param("glom", True, marks=opt_in),
        pytest.param("nbstripout", False, marks=opt_in),
        pytest.param("nbstripout", True, marks=opt_in),
        pytest.param("mkdocs", False, marks=opt_in),
        pytest.param("mkdocs", True, marks=opt_in),
        pytest.param("pyproject-api", False, marks=opt_in),
        pytest.param("pyproject-api", True, marks=opt_in),
    ],
)
def test_the_gate_gives_the_verdict_of_the_projects_own_ci(
    tmp_path: Path, name: str, mutant: bool
) -> None:
    pair = pair_named(name)
    wanted = expected_introduced(pair, mutant)
    assert wanted is not None, f"{name}: no CI measurement recorded"
    repo = release_pair(tmp_path, pair.name, pair.base, pair.head)
    if mutant:
        mutate(repo, pair.mutation.path, pair.mutation.old, pair.mutation.new)
    result = gate(tmp_path, repo, "--shards", "2", base=f"v{pair.base}")
    document = result.document
    assert document["status"] == ("failed" if wanted else "passed"), (
        document["reasons"],
        document["unmeasured"],
        document["introduced"],
    )
    assert {normalized(test) for test in document["introduced"]} == wanted
    assert result.code == (1 if wanted else 0)
