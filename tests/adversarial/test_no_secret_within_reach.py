"""No secret within reach (issue 38, part 3).

- A head that commits `tox.ini -> /proc/self/environ` (or any configuration file linked out of
  the repository) had the gate read it in its own process, and the exit-2 error quoted the
  file: the gate's whole environment, tokens included. The gate now refuses a link out of the
  checkout, and no error quotes a file's content.
- A build saw the user's `.git/config` (where actions/checkout keeps an `http.extraheader`
  token): builds now run in a throw-away clone and see nothing of the user's `.git`.
- A malformed `postgresql://user:secret@...` URL was echoed with its password: every message
  shows a URL's password as `***`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from release_ledger.adapters.executors import sandbox
from release_ledger.cli.main import cli
from release_ledger.domain.text import masked
from tests import gatekit
from tests.adversarial.test_build_confined import PYPROJECT, secrets_around
from tests.gitrepo import commit, git, make_repo, tag

SECRET = "gh5-t0k3n-b7e1"
LINKED = [
    "tox.ini", "setup.cfg", "pytest.ini", "pyproject.toml", "conftest.py", "tests/conftest.py",
    "tests/test_link.py",
]  # fmt: skip


def _symlinked(repo: Path, name: str, target: str) -> None:
    path = repo / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"link {name}")


def _nowhere_in(result: gatekit.Result, workdir: Path, secret: str) -> None:
    """Neither the output nor anything the ledger kept holds the secret."""
    assert secret not in result.stdout and secret not in result.stderr
    for kept in (workdir / "ledger").rglob("*"):
        if kept.is_file():
            assert secret.encode() not in kept.read_bytes(), kept


@pytest.mark.slow
@pytest.mark.parametrize("name", LINKED)
def test_a_file_linked_to_the_gates_environment_is_never_read_nor_quoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    _symlinked(repo, name, "/proc/self/environ")

    result = gatekit.gate(tmp_path, repo, "--env", "none", "--no-release-builds",
                          "--measure", "never")  # fmt: skip

    _nowhere_in(result, tmp_path, SECRET)
    assert result.code in (0, 1, 2, 3), (result.stdout, result.stderr)
    if result.code == 2:
        assert result.stderr.strip().count("\n") == 0
    if name in ("tox.ini", "setup.cfg", "pytest.ini"):  # pytest's own configuration
        assert result.code == 2 and "a link out of the checkout" in result.stderr


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("tox.ini", f"token = {SECRET}\n", "not valid INI (at line 1)"),
        ("pytest.ini", f"[pytest]\naddopts = -q\n{SECRET}\n", "not valid INI"),
        ("setup.cfg", f"[tool:pytest]\n{SECRET}\n", "not valid INI (at line 2)"),
        ("pytest.toml", f'[pytest]\n{SECRET} = "1\n', "not valid TOML (at line"),
        ("tox.ini", b"[pytest]\naddopts = \xff" + SECRET.encode() + b"\n", "not UTF-8 text"),
    ],
)
def test_a_broken_configuration_is_named_never_quoted(
    tmp_path: Path, name: str, content: str | bytes, said: str
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    commit(repo, {name: content})

    result = gatekit.gate(tmp_path, repo, "--env", "none", "--no-release-builds")

    assert result.code == 2, (result.stdout, result.stderr)
    assert result.stderr.strip().count("\n") == 0
    assert f"cannot read pytest configuration {name}: {said}" in result.stderr
    assert SECRET not in result.stderr


# -- the user's .git in a build -------------------------------------------------------------

SNOOPING_SETUP = '''
import os
from setuptools import setup

SECRET, REPO = {reversed_secret!r}[::-1], {repo!r}  # not in this file as it is
found = []
for top in (os.path.join(REPO, ".git"), os.path.join(os.getcwd(), ".git"), os.getcwd()):
    for folder, _, names in os.walk(top):
        for name in names:
            try:
                with open(os.path.join(folder, name), "rb") as handle:
                    if SECRET.encode() in handle.read():
                        found.append(os.path.join(folder, name))
            except OSError:
                pass
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "src", "snoop", "_found.py"), "w") as handle:
    handle.write("FOUND = %r\\n" % (sorted(set(found)),))
setup()
'''
TEST = "from snoop import FOUND\n\n\ndef test_the_build_found_no_token():\n    assert FOUND == []\n"


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """Outside /tmp (whose private mount would hide the repository anyway)."""
    folder = Path(tempfile.mkdtemp(prefix="release-ledger-gitconfig-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_a_build_sees_nothing_of_the_users_git_config(
    outside_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap cannot run here: builds run unconfined")
    secrets_around(outside_tmp, monkeypatch)
    files = {
        "pyproject.toml": PYPROJECT.format(version="1.0"),
        "setup.py": "from setuptools import setup\nsetup()\n",
        "src/snoop/__init__.py": "FOUND = []\n",
        "tests/test_snoop.py": "def test_a():\n    pass\n",
        ".gitignore": "src/snoop/_found.py\n",
    }
    repo = make_repo(outside_tmp, files)
    tag(repo, "v1")
    # where actions/checkout keeps its token
    git(repo, "config", "http.https://github.com/.extraheader", f"AUTHORIZATION: basic {SECRET}")
    commit(repo, {
        "pyproject.toml": PYPROJECT.format(version="2.0"),
        "setup.py": SNOOPING_SETUP.format(reversed_secret=SECRET[::-1], repo=str(repo)),
        "src/snoop/__init__.py": "from snoop._found import FOUND\n",
        "tests/test_snoop.py": TEST,
    })  # fmt: skip

    result = gatekit.gate(outside_tmp, repo, "--no-release-builds", "--measure", "never")

    assert result.code == 0, (result.document.get("introduced"), result.stderr)
    assert result.document["status"] == "passed"
    assert SECRET in (repo / ".git" / "config").read_text()  # there, out of the build's sight


# -- a URL's password ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://gate:{SECRET}@",
        f"postgresql://gate:{SECRET}@db.example:99999x/ledger",
        f"postgresql://gate:{SECRET}@db@example/ledger",
        f"mysql://gate:{SECRET}@db.example/ledger",
        f"postgresql://:{SECRET}@127.0.0.1:1/ledger",
    ],
)
def test_a_ledger_urls_password_is_never_shown(url: str) -> None:
    for args, env in (
        (["runs", "--ledger", url], {}),
        (["runs"], {"LEDGER_URL": url}),
        (["verify", "--ledger", url], {}),
    ):
        done = CliRunner().invoke(cli, args, env=env)
        assert done.exit_code == 2, done.output
        assert SECRET not in done.stderr and SECRET not in done.stdout


def test_masking_keeps_everything_but_the_password() -> None:
    assert masked("at postgresql://gate:pw@db:5432/ledger now") == (
        "at postgresql://gate:***@db:5432/ledger now"
    )
    assert masked("'https://x-access-token:ghp_1@github.com/o/r'") == (
        "'https://x-access-token:***@github.com/o/r'"
    )
    assert masked("sqlite:///var/ledger.db and http://host:8080/x") == (
        "sqlite:///var/ledger.db and http://host:8080/x"
    )
