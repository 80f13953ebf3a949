"""Secrets never reach the suite (issue 26, part 2): a shard's environment is built from an
allow-list, never the gate's whole environment.

A real gate runs a head whose tests look for the gate's secrets: its ledger URL with a
database password, `PGPASSWORD`, tokens. A test passes when what it looks for is absent, so a
leak is an introduced failure and the verdict `failed`. The variables the user names in
`pass-env` do reach the suite; the gate's own `LEDGER_*` settings never do, whatever is named.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from release_ledger.adapters.executors import environment
from release_ledger.domain.errors import BadInput
from release_ledger.ledger.settings import checked_pass_env, gate_options
from tests import gatekit
from tests.gitrepo import commit, make_repo, tag

SECRET = "s3cret-4f1d"
SECRETS = {
    "LEDGER_URL": f"postgresql://admin:{SECRET}@db.example/ledger",
    "PGPASSWORD": SECRET,
    "GITHUB_TOKEN": f"ghp_{SECRET}",
    "AWS_SECRET_ACCESS_KEY": SECRET,
    "DATABASE_URL": f"postgresql://app:{SECRET}@localhost/app",
}

SNOOPING = '''
import os
import tempfile
from pathlib import Path

SECRET = {secret!r}
REAL_HOME = {home!r}


def test_no_secret_is_in_the_environment():
    leaked = sorted(k for k, v in os.environ.items() if SECRET in v or SECRET in k)
    assert leaked == []


def test_the_gates_own_settings_are_absent():
    assert [k for k in os.environ if k.startswith("LEDGER_")] == []


def test_the_named_ci_variables_are_present():
    assert os.environ.get("CI_JOB_ID") == "4242"
    assert os.environ.get("BUILD_NUMBER") == "17"
    assert "UNNAMED_CI_VARIABLE" not in os.environ


def test_home_and_tmp_are_the_attempts_own_and_writable():
    home = os.environ["HOME"]
    assert os.path.realpath(home) != os.path.realpath(REAL_HOME)
    Path(home, ".cache-probe").write_text("x")
    with tempfile.NamedTemporaryFile() as handle:
        handle.write(b"x")
'''


def test_the_gates_secrets_never_reach_the_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CI_JOB_ID", "4242")
    monkeypatch.setenv("BUILD_NUMBER", "17")
    monkeypatch.setenv("UNNAMED_CI_VARIABLE", "1")
    repo = make_repo(
        tmp_path,
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "pyproject.toml": '[tool.release-ledger]\npass-env = ["CI_JOB_ID", "BUILD_*"]\n',
        },
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_snoop.py": SNOOPING.format(secret=SECRET, home=str(Path.home()))})

    result = gatekit.gate(tmp_path, repo, "--env", "none", "--no-release-builds")

    assert result.code == 0, result.document.get("introduced") or result.stderr
    assert result.document["status"] == "passed"


def test_a_shard_environment_keeps_only_the_allow_list_and_what_is_named() -> None:
    gate_env = {
        **SECRETS,
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": "/root",
        "CI_JOB_ID": "1",
        "SSH_AUTH_SOCK": "/run/agent",
        "PYTHONPATH": "/gate/overlay",
    }
    env = environment.shard_env(
        gate_env, {}, pass_env=("CI_*", "LEDGER_URL"), home="/attempt/home", tmp="/attempt/tmp"
    )

    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": "/attempt/home",
        "TMPDIR": "/attempt/tmp",
        "CI_JOB_ID": "1",
        "PYTHONPATH": "/gate/overlay",  # --env none: the gate's path is how the suite imports
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def test_with_a_venv_the_gates_python_path_is_not_passed() -> None:
    env = environment.shard_env({"PATH": "/usr/bin", "PYTHONPATH": "/gate"},
                                {"VIRTUAL_ENV": ["/venv"]})  # fmt: skip
    assert "PYTHONPATH" not in env and env["VIRTUAL_ENV"] == "/venv"


@pytest.mark.parametrize(
    "names",
    [["*"], ["LEDGER_URL"], ["LEDGER_*"], ["LED*"], ["A B"], ["$HOME"], [3], ["CI_*_X"]],
)
def test_pass_env_that_would_pass_everything_or_the_gates_settings_is_refused(
    names: list[object],
) -> None:
    with pytest.raises(BadInput, match="pass-env"):
        checked_pass_env(names)


def test_pass_env_names_and_prefixes_are_taken() -> None:
    assert checked_pass_env(["CI", "CI_*", "GITHUB_SHA", "CI"]) == ("CI", "CI_*", "GITHUB_SHA")


def test_the_pass_env_flag_wins_over_the_table_and_is_recorded(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "pyproject.toml": '[tool.release-ledger]\npass-env = ["BUILD_*"]\n',
        },
    )
    tag(repo, "v1")
    from_table = gate_options({"repo": str(repo), "base": "v1", "env": "none"})
    from_flag = gate_options({"repo": str(repo), "base": "v1", "env": "none",
                              "pass_env": ("CI_JOB_ID",)})  # fmt: skip

    assert from_table.environment_request.pass_env == ("BUILD_*",)
    assert from_flag.environment_request.pass_env == ("CI_JOB_ID",)
    assert from_flag.recorded()["pass_env"] == ["CI_JOB_ID"]
    assert "pass-env=CI_JOB_ID" in from_flag.environment_setting  # results kept apart


def test_a_bad_pass_env_is_one_line_and_exit_2(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    result = gatekit.gate(tmp_path, repo, "--env", "none", "--pass-env", "LEDGER_URL")
    assert result.code == 2
    assert result.stderr.strip().count("\n") == 0
    assert "pass-env LEDGER_URL" in result.stderr
