"""A candidate cannot loosen the gate that judges it: `[tool.release-ledger]`'s policy keys are
read at base (the release already approved), the keys that describe the code being tested at
head; head's differing policy is recorded and told, a flag still decides for one gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from release_ledger.domain.errors import BadInput
from release_ledger.ledger.options import DEFAULTS, SETTINGS
from release_ledger.ledger.settings import gate_options
from tests.gitrepo import commit, make_repo, tag

HOSTILE = (
    '[tool.release-ledger]\npass-env = ["AWS_*"]\nrule = "default"\nheavier-factor = 1000.0\n'
    'time-factor = 1000.0\ntimeout = 99999.0\noutputs = ["src/*"]\nrounds = 9\n'
    'command = "true {junit} {files}"\nexecutor = "ssh"\nhost = "me@attacker.example"\n'
    'quarantine = ["tests/test_a.py::test_a"]\nrequired-checks = ["gate"]\n'
)
BASE = '[tool.release-ledger]\nrule = "strict"\nrequired-checks = ["gate", "docs"]\n'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path, {"pyproject.toml": BASE, "tests/test_a.py": "def test_a(): pass\n"})
    tag(repo, "v1")
    return repo


def test_a_hostile_heads_policy_is_not_applied_but_recorded(repo: Path) -> None:
    commit(repo, {"pyproject.toml": HOSTILE})
    options = gate_options({"repo": str(repo), "base": "v1"})
    assert options.pass_env == () and options.outputs == () and options.quarantine == ()
    assert options.rule == "strict" and options.rounds == 2 and options.executor == "local"
    assert options.heavier_factor == 2 and options.time_factor == 10
    assert options.timeout_s == DEFAULTS["timeout_s"] and "true" not in options.command
    assert set(options.head_settings_ignored) == {
        "pass-env", "rule", "heavier-factor", "time-factor", "timeout", "outputs", "rounds",
        "command", "executor", "host", "quarantine", "required-checks",
    }  # fmt: skip
    assert options.recorded()["head_settings_ignored"]["host"] == "me@attacker.example"
    assert "not applied" in options.told_settings()[0]


def test_flags_decide_for_one_gate_and_are_not_reported_as_ignored(repo: Path) -> None:
    commit(repo, {"pyproject.toml": HOSTILE})
    options = gate_options({"repo": str(repo), "base": "v1", "rounds": 9, "pass_env": ("CI",)})
    assert options.rounds == 9 and options.pass_env == ("CI",)
    assert "rounds" not in options.head_settings_ignored
    assert "pass-env" not in options.head_settings_ignored


def test_what_describes_the_code_is_read_at_head(repo: Path) -> None:
    table = (
        '[tool.release-ledger]\nenv = "none"\nresolve-as-of = "2024-01-01"\n'
        'rule = "strict"\nrequired-checks = ["gate", "docs", "x"]\n'
    )
    commit(repo, {"pyproject.toml": table})
    options = gate_options({"repo": str(repo), "base": "v1"})
    assert options.environment == "none" and options.exclude_newer == "2024-01-01T00:00:00Z"
    # the same policy as base's, or only more required checks: nothing to report
    assert options.head_settings_ignored == {} and options.told_settings() == []


def test_a_head_that_sets_the_default_base_left_unset_is_not_reported(repo: Path) -> None:
    commit(repo, {"pyproject.toml": BASE + 'rounds = 2\nexecutor = "local"\n'})
    assert gate_options({"repo": str(repo), "base": "v1"}).head_settings_ignored == {}


def test_every_setting_declares_where_it_is_read() -> None:
    at_head = {s.table for s in SETTINGS if s.at_head}
    assert at_head == {"env", "python", "extras", "resolve-as-of"}


def test_a_table_base_must_be_a_tag(repo: Path) -> None:
    """Else the candidate could compare itself with a commit that already has its failures."""
    first = commit(repo, {"tests/test_a.py": "def test_a(): assert 0\n"}, "breaks test_a")
    commit(repo, {"pyproject.toml": f'[tool.release-ledger]\nbase = "{first}"\n'})
    with pytest.raises(BadInput, match="is not a tag"):
        gate_options({"repo": str(repo)})
    commit(repo, {"pyproject.toml": '[tool.release-ledger]\nbase = "v1"\n'})
    assert gate_options({"repo": str(repo)}).base == "v1"
    assert gate_options({"repo": str(repo), "base": first}).base == first  # a flag may


def test_keys_base_cannot_be_read_with_are_skipped_not_fatal(tmp_path: Path) -> None:
    """A released commit cannot be corrected: its unknown or mistyped keys are skipped."""
    table = '[tool.release-ledger]\nrounds = "three"\nretired-key = 1\nrule = "strict"\n'
    repo = make_repo(tmp_path, {"pyproject.toml": table, "tests/test_a.py": "def test_a(): pass\n"})
    tag(repo, "v1")
    commit(repo, {"pyproject.toml": '[tool.release-ledger]\nrule = "strict"\n'})  # head fixed
    options = gate_options({"repo": str(repo), "base": "v1"})
    assert options.rule == "strict" and options.rounds == 2
    assert sorted(options.base_settings_unread) == ["retired-key", "rounds"]
    assert "cannot read, skipped: " in options.told_settings()[0]


def test_a_malformed_head_table_is_still_bad_input(repo: Path) -> None:
    commit(repo, {"pyproject.toml": '[tool.release-ledger]\nrounds = "three"\n'})
    with pytest.raises(BadInput, match="rounds"):
        gate_options({"repo": str(repo), "base": "v1"})
