"""The test invocation a revision's own declaration resolves to, as one plain value.

The gate shards the suite the project runs, never a command it rebuilt by guessing: the runner,
the working directory, the options, the targets and the variables come from the declared
source (a tox environment, a nox session, a hatch script, the pytest configuration) as the
tool that owns it reads them, and options are told from targets by pytest's own argument
parser with the revision's plugins loaded (adapters/invocation_probe.py). This module only
holds the result and the pure rules applied to it (which options a shard drops, how a shard's
arguments are made, how an installed module is named stably across revisions).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Where an installed target is named: its path inside site-packages, the same at every
# revision and on every machine (never `.tox/py311/lib/python3.11/site-packages/pkg`).
INSTALLED_PREFIX = "{site-packages}/"

# Options that would stop a shard early, write a report of their own, or share one folder
# between shards running side by side (`--basetemp` is emptied by pytest at start): never
# passed to a shard, whatever the declaration says.
STOPPING_OPTIONS = (
    "-x",
    "--exitfirst",
    "--maxfail",
    "--junitxml",
    "--junit-xml",
    "--sw",
    "--stepwise",
    "--basetemp",
)

# Coverage (pytest-cov's `--cov`, `--cov-*`) measures the whole run: a shard's share never
# meets a `--cov-fail-under` (exit 1 with no test failed), and its reports name the
# declaration's folders. A shard that declares it runs with coverage off.
COVERAGE_OFF = "--no-cov"

Runner = Literal["pytest", "unittest"]


class Target(BaseModel):
    """One thing the declared command collects: a path in the checkout, or a module or package
    of the installed project named by its path inside site-packages (`installed`)."""

    model_config = ConfigDict(frozen=True)

    path: str  # POSIX; relative to the checkout, or to site-packages when `installed`
    installed: bool = Field(default=False, exclude_if=lambda value: not value)

    def shown(self) -> str:
        """As `ledger show` writes it: installed targets under `{site-packages}/`."""
        return INSTALLED_PREFIX + self.path if self.installed else self.path


class TestInvocation(BaseModel):
    """How one revision's tests are run on one interpreter, as its declaration says.

    `source` names the declaration (`tox:py311-tests`, `pytest-config`, `default`); `fallback`
    says why a declaration could not be used when it is a fallback (one line, empty when it
    was resolved). `options` are the runner's options in the declared order, with
    `{posargs:DEFAULT}` defaults applied (`posargs`); `targets` what it collects (empty: the
    runner's own default, pytest's `testpaths` or its working directory). For `unittest`
    (run under pytest), `start_directory` and `pattern` are its discovery's `-s` and `-p`.
    """

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(frozen=True)

    runner: Runner = "pytest"
    source: str = "default"
    workdir: str = Field(default="", exclude_if=lambda value: value == "")
    options: tuple[str, ...] = ()
    targets: tuple[Target, ...] = ()
    env: dict[str, str] = Field(default_factory=dict, exclude_if=lambda value: not value)
    posargs: tuple[str, ...] = Field(default=(), exclude_if=lambda value: not value)
    start_directory: str = Field(default="", exclude_if=lambda value: value == "")
    pattern: str = Field(default="", exclude_if=lambda value: value == "")
    parsed_by: str = Field(default="", exclude_if=lambda value: value == "")
    fallback: str = Field(default="", exclude_if=lambda value: value == "")

    def shard_options(self) -> list[str]:
        """The options a shard passes (the declared ones less `STOPPING_OPTIONS`, coverage
        off where declared: `with_coverage_off`)."""
        return with_coverage_off(drop_options(self.options, STOPPING_OPTIONS))

    def shard_arguments(self, files: Sequence[str]) -> list[str]:
        """A shard's runner arguments: the declared options, its own files as targets."""
        return [*self.shard_options(), *files]

    def installed_targets(self) -> list[str]:
        """Installed modules and packages the declaration collects (inside site-packages)."""
        return [t.path for t in self.targets if t.installed]

    def checkout_targets(self) -> list[str]:
        """Targets in the checkout (relative to it)."""
        return [t.path for t in self.targets if not t.installed]

    def describe(self) -> str:
        """One line for `ledger show`: the runner, where, what it runs, from which source."""
        words: list[str] = [self.runner]
        if self.runner == "unittest":
            words += [f"-s {self.start_directory}" if self.start_directory else "",
                      f"-p {self.pattern}" if self.pattern else ""]  # fmt: skip
        words += [*self.options, *(t.shown() for t in self.targets)]
        text = " ".join(w for w in words if w)
        where = f" in {self.workdir}/" if self.workdir else ""
        env = f"; env {', '.join(sorted(self.env))}" if self.env else ""
        posargs = f"; posargs default {' '.join(self.posargs)}" if self.posargs else ""
        parsed = f"; parsed by {self.parsed_by}" if self.parsed_by else ""
        fallback = f" (fallback: {self.fallback})" if self.fallback else ""
        return f"`{text}`{where} from {self.source}{fallback}{posargs}{env}{parsed}"


def option_groups(options: Sequence[str]) -> list[list[str]]:
    """`options` as groups: a word starting with `-` and the values that follow it (the words
    up to the next option). Only meaningful for a list pytest's parser has already told from
    its targets, so every non-option word in it is an option's value."""
    groups: list[list[str]] = []
    for word in options:
        if word.startswith("-") or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    return groups


def _option_name(word: str) -> str:
    if word.startswith("--"):
        return word.split("=", 1)[0]
    return word[:2]


def drop_options(options: Sequence[str], names: Iterable[str]) -> list[str]:
    """`options` without the groups whose option is one of `names` (its value included,
    whether `--name value`, `--name=value` or `-kvalue`)."""
    dropped = set(names)
    kept: list[str] = []
    for group in option_groups(options):
        if _option_name(group[0]) not in dropped:
            kept.extend(group)
    return kept


def with_coverage_off(options: Sequence[str]) -> list[str]:
    """`options` and `COVERAGE_OFF` where they ask pytest-cov for coverage."""
    asked = any(o == "--cov" or o.startswith(("--cov=", "--cov-")) for o in options)
    return [*options, COVERAGE_OFF] if asked and COVERAGE_OFF not in options else list(options)


def split_arguments(words: Sequence[str], positional: Iterable[int]) -> tuple[list[str], list[str]]:
    """(options, targets) of `words`, given which indices the runner's parser took as
    positional (its targets); everything else, values included, is an option."""
    chosen = set(positional)
    options = [w for i, w in enumerate(words) if i not in chosen]
    targets = [w for i, w in enumerate(words) if i in chosen]
    return options, targets


def inside(path: str, folder: str) -> str | None:
    """`path` relative to `folder` (both absolute, POSIX), or None when it is not inside."""
    base = folder.rstrip("/")
    if path == base:
        return "."
    if path.startswith(base + "/"):
        return path[len(base) + 1 :]
    return None


def stable_node_id(node_id: str) -> str:
    """A collected item's id the same at every revision and on every machine: one in an
    installed package (under any `site-packages`, however pytest wrote the path to it) is
    named by its path inside site-packages (`{site-packages}/pkg/mod.py::name`)."""
    path, sep, rest = node_id.partition("::")
    normal = path.replace("\\", "/")
    marker = "/site-packages/"
    if marker not in "/" + normal:
        return node_id
    return INSTALLED_PREFIX + ("/" + normal).rsplit(marker, 1)[1] + sep + rest


def file_of(node_id: str) -> str:
    """The file part of a node id (`tests/test_a.py::T::t[1]` -> `tests/test_a.py`)."""
    return node_id.partition("::")[0]


def collected_files(node_ids: Sequence[str]) -> list[str]:
    """The files of collected items, each once, in collection order (stable ids)."""
    return list(collected_items(node_ids))


def collected_items(node_ids: Sequence[str]) -> dict[str, int]:
    """How many items were collected in each file (a parametrized case each), the files in
    collection order (stable ids): what a first plan weighs a never-measured file by."""
    counts: dict[str, int] = {}
    for node_id in node_ids:
        file = file_of(stable_node_id(node_id))
        counts[file] = counts.get(file, 0) + 1
    return counts
