"""Find a checkout's test files without importing any test code.

With no patterns this applies pytest's own file collection rules statically (config file
precedence, `testpaths`, `python_files`, `norecursedirs`, `--ignore`/`--ignore-glob` in
`addopts`, literal `collect_ignore` lists in conftest.py, virtualenv skipping), so a test file
that kills its process at import is still discovered — and later named as a culprit.

pytest's own doctest plugin is modelled too: a text file matching `--doctest-glob` (default
`test*.txt`) is a test file, and with `--doctest-modules` in `addopts` so is every `.py` file
under the start paths (conftest.py and `__init__.py` included; not `__main__.py`, nor a
`setup.py` that mentions setuptools or distutils) — a package's doctests are tests its own
pytest runs. A module without a doctest collects nothing and is measured empty, like any test
file without a test. `-p no:doctest` in `addopts` turns both off.
Not modelled: other plugins that collect other file types, and conftest hooks computed at run
time.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import glob
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from release_ledger.domain.errors import BadInput

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
DEFAULT_DOCTEST_GLOBS = ("test*.txt",)
UNITTEST_DEFAULT_PATTERN = "test*.py"  # `python -m unittest`'s, where pytest's rules find none
DEFAULT_NORECURSEDIRS = (
    "*.egg",
    ".*",
    "_darcs",
    "build",
    "CVS",
    "dist",
    "node_modules",
    "venv",
    "{arch}",
)

Options = dict[str, object]


@dataclass(frozen=True)
class PytestConfig:
    """The collection-relevant part of a repository's pytest configuration."""

    source: str | None = None  # the config file that won, relative to the root
    testpaths: tuple[str, ...] = ()
    python_files: tuple[str, ...] = DEFAULT_PYTHON_FILES
    norecursedirs: tuple[str, ...] = DEFAULT_NORECURSEDIRS
    ignore: tuple[str, ...] = ()
    ignore_glob: tuple[str, ...] = ()
    collect_in_virtualenv: bool = False
    doctest_modules: bool = False  # `--doctest-modules`: every module is a test file
    doctest_globs: tuple[str, ...] = DEFAULT_DOCTEST_GLOBS  # `--doctest-glob`; () when disabled


def discover_test_files(checkout: Path, patterns: Sequence[str] | None = None) -> list[str]:
    """Sorted POSIX paths (relative to `checkout`) of the test files a run would collect.

    `patterns` (e.g. `**/*.test.js`) replace pytest's rules for other runners: a pattern with a
    `/` matches the whole relative path (`**` spans directories), one without matches the file
    name; pytest's default `norecursedirs` (`.git`, `node_modules`, ...) are still pruned.
    """
    root = checkout.resolve()
    if not root.is_dir():
        raise BadInput(f"no such directory: {checkout}")
    if patterns is not None:
        matchers = [_glob_matcher(p) for p in patterns if p.strip()]
        if not matchers:
            raise BadInput("no test file patterns given")
        return _walk(
            root,
            [root],
            DEFAULT_NORECURSEDIRS,
            lambda rel, name: any(m(rel, name) for m in matchers),
            ignored=lambda path: False,
        )
    config = read_pytest_config(root)
    starts = _start_paths(root, config)
    ignored = _ignore_predicate(root, config)
    python_files = config.python_files

    def wanted(rel: str, name: str) -> bool:
        path = root / rel
        if not name.endswith(".py"):
            return any(_fnmatch_ex(p, path, name) for p in config.doctest_globs)
        if config.doctest_modules and not _doctest_skips(path, name):
            return True
        # conftest.py is configuration even when a broad python_files pattern matches it.
        return name != "conftest.py" and any(_fnmatch_ex(p, path, name) for p in python_files)

    found = _walk(root, starts, config.norecursedirs, wanted, ignored, config=config)
    # An initial path that is a file is collected whatever its name (pytest's isinitpath).
    for start in starts:
        if start.is_file() and start.suffix == ".py" and not ignored(start):
            found.append(start.relative_to(root).as_posix())
    if not found:
        # No file pytest's rules name: a unittest suite (`test.py`, `tests.py`) found the way
        # `python -m unittest` finds it, run under pytest (which runs its TestCase classes).
        found = _walk(root, starts, config.norecursedirs, _unittest_default, ignored, config)
    return sorted(set(found))


def collection_starts(checkout: Path) -> list[str]:
    """pytest's start paths, relative to the checkout, in the order its configuration
    declares them (`testpaths`); `.` when it declares none: the order of its collection."""
    root = checkout.resolve()
    starts = _start_paths(root, read_pytest_config(root))
    return [s.relative_to(root).as_posix() if s != root else "." for s in starts]


def _unittest_default(rel: str, name: str) -> bool:
    """unittest's default discovery pattern (`test*.py`), conftest.py never."""
    return fnmatch.fnmatch(name, UNITTEST_DEFAULT_PATTERN) and name != "conftest.py"


def read_pytest_config(root: Path) -> PytestConfig:
    """The first pytest configuration in `root`, in pytest's precedence order. A link out of
    the checkout is refused, and an error never quotes the file (it is the candidate's: a
    `tox.ini` linked to `/proc/self/environ` would quote the gate's environment)."""
    root = root.resolve()
    for name, loader in _LOADERS:
        path = root / name
        if not path.is_file():
            continue
        if not inside(root, path):
            raise BadInput(f"cannot read pytest configuration {name}: a link out of the checkout")
        try:
            options = loader(path)
        except (tomllib.TOMLDecodeError, configparser.Error, UnicodeDecodeError) as error:
            raise BadInput(f"cannot read pytest configuration {name}: {_why(error)}") from None
        if options is not None:
            return _config_from(name, options)
    return PytestConfig()


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, its links followed, lies in `root` (resolved): what the gate reads of a
    checkout never leaves it (a link to `/proc/self/environ`, `/dev/zero`, `~/.netrc`)."""
    real = os.path.realpath(path)
    return real == str(root) or real.startswith(str(root).rstrip(os.sep) + os.sep)


_TOML_WHERE = re.compile(r"\((at line \d+, column \d+|at end of document)\)")


def _why(error: Exception) -> str:
    """Why a configuration file did not read, without a word of its content (configparser
    quotes the offending line; a section or option name is content too)."""
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(error, tomllib.TOMLDecodeError):
        where = _TOML_WHERE.search(str(error))
        return "not valid TOML" + (f" ({where.group(1)})" if where else "")
    line = getattr(error, "lineno", None)
    listed = getattr(error, "errors", None)
    if isinstance(error, configparser.ParsingError) and listed:
        line = listed[0][0]
    return "not valid INI" + (f" (at line {line})" if isinstance(line, int) else "")


# -- configuration files --------------------------------------------------------------------


def _ini_section(path: Path, section: str, always: bool) -> Options | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
    if parser.has_section(section):
        return dict(parser.items(section))
    return {} if always else None


def _toml(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _load_pytest_toml(path: Path) -> Options | None:
    table = _toml(path).get("pytest")
    return dict(table) if isinstance(table, dict) else {}


def _load_pyproject(path: Path) -> Options | None:
    tool = _toml(path).get("tool")
    pytest_table = tool.get("pytest") if isinstance(tool, dict) else None
    if not isinstance(pytest_table, dict):
        return None
    native = {k: v for k, v in pytest_table.items() if k != "ini_options"}
    if native:
        return native
    ini = pytest_table.get("ini_options")
    return dict(ini) if isinstance(ini, dict) else None


_LOADERS: tuple[tuple[str, Callable[[Path], Options | None]], ...] = (
    ("pytest.toml", _load_pytest_toml),
    (".pytest.toml", _load_pytest_toml),
    ("pytest.ini", lambda p: _ini_section(p, "pytest", always=True)),
    (".pytest.ini", lambda p: _ini_section(p, "pytest", always=True)),
    ("pyproject.toml", _load_pyproject),
    ("tox.ini", lambda p: _ini_section(p, "pytest", always=False)),
    ("setup.cfg", lambda p: _ini_section(p, "tool:pytest", always=False)),
)


def _args(value: object) -> tuple[str, ...] | None:
    """pytest's `args` ini type: a shell-split string, or a TOML list as is."""
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return (str(value),)


def _doctest_skips(path: Path, name: str) -> bool:
    """The modules pytest's doctest plugin leaves out under `--doctest-modules`."""
    if name == "__main__.py":
        return True
    if name != "setup.py":
        return False
    try:
        contents = path.read_bytes() if not path.is_symlink() else b""
    except OSError:
        return False
    return b"setuptools" in contents or b"distutils" in contents


def _config_from(name: str, options: Options) -> PytestConfig:
    addopts = _args(options.get("addopts")) or ()
    ignore, ignore_glob, in_venv = _collection_opts(addopts)
    doctest_modules, doctest_globs = _doctest_opts(addopts)
    return PytestConfig(
        source=name,
        testpaths=_args(options.get("testpaths")) or (),
        python_files=_args(options.get("python_files")) or DEFAULT_PYTHON_FILES,
        norecursedirs=(
            _args(options["norecursedirs"]) if "norecursedirs" in options else DEFAULT_NORECURSEDIRS
        )
        or (),
        ignore=ignore,
        ignore_glob=ignore_glob,
        collect_in_virtualenv=in_venv,
        doctest_modules=doctest_modules,
        doctest_globs=doctest_globs,
    )


def _doctest_opts(addopts: Sequence[str]) -> tuple[bool, tuple[str, ...]]:
    """(`--doctest-modules` given, the `--doctest-glob` patterns) from `addopts`; off and none
    when the doctest plugin is disabled (`-p no:doctest`)."""
    modules = False
    globs: list[str] = []
    disabled = False
    args = list(addopts)
    for index, arg in enumerate(args):
        following = args[index + 1] if index + 1 < len(args) else None
        if arg == "--doctest-modules":
            modules = True
        elif arg == "--doctest-glob" and following is not None:
            globs.append(following)
        elif arg.startswith("--doctest-glob="):
            globs.append(arg.split("=", 1)[1])
        elif (arg == "-p" and following == "no:doctest") or arg == "-pno:doctest":
            disabled = True
    if disabled:
        return False, ()
    return modules, tuple(globs) or DEFAULT_DOCTEST_GLOBS


def _collection_opts(addopts: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    ignore: list[str] = []
    ignore_glob: list[str] = []
    in_venv = False
    it = iter(addopts)
    for arg in it:
        for flag, sink in (("--ignore", ignore), ("--ignore-glob", ignore_glob)):
            if arg == flag:
                value = next(it, None)
                if value is not None:
                    sink.append(value)
            elif arg.startswith(flag + "="):
                sink.append(arg[len(flag) + 1 :])
        if arg == "--collect-in-virtualenv":
            in_venv = True
    return tuple(ignore), tuple(ignore_glob), in_venv


# -- walking --------------------------------------------------------------------------------


def _start_paths(root: Path, config: PytestConfig) -> list[Path]:
    starts: list[Path] = []
    for testpath in config.testpaths:
        matches = sorted(glob.glob(testpath, root_dir=root, recursive=True))
        starts.extend((root / m).resolve() for m in matches)
    starts = [s for s in starts if s.exists() and s.is_relative_to(root)]
    return starts or [root]


def _ignore_predicate(root: Path, config: PytestConfig) -> Callable[[Path], bool]:
    ignore = {(root / p).resolve() for p in config.ignore}
    globs = [str(root / g) for g in config.ignore_glob]
    conftest_cache: dict[Path, tuple[set[Path] | None, list[str] | None]] = {}

    def from_conftests(path: Path) -> tuple[set[Path], list[str]]:
        """The nearest conftest defining each name wins, as in pytest's `_rget_with_confmod`."""
        paths: set[Path] | None = None
        patterns: list[str] | None = None
        for folder in (path.parent, *path.parent.parents):
            if not folder.is_relative_to(root) or (paths is not None and patterns is not None):
                break
            if folder not in conftest_cache:
                conftest_cache[folder] = _conftest_ignores(folder)
            here_paths, here_globs = conftest_cache[folder]
            paths = here_paths if paths is None else paths
            patterns = here_globs if patterns is None else patterns
        return paths or set(), patterns or []

    def ignored(path: Path) -> bool:
        if path.name == "__pycache__" or path in ignore:
            return True
        if any(fnmatch.fnmatch(str(path), g) for g in globs):
            return True
        extra_paths, extra_globs = from_conftests(path)
        return path in extra_paths or any(fnmatch.fnmatch(str(path), g) for g in extra_globs)

    return ignored


def _conftest_ignores(folder: Path) -> tuple[set[Path] | None, list[str] | None]:
    """Literal `collect_ignore`/`collect_ignore_glob` lists in a conftest, read with `ast`.

    None means the conftest does not define the name (so a farther one may).
    """
    conftest = folder / "conftest.py"
    if not conftest.is_file() or conftest.is_symlink():  # a link is not read (it may lead out)
        return None, None
    try:
        tree = ast.parse(conftest.read_bytes(), filename=str(conftest))
    except (SyntaxError, ValueError):
        return None, None
    paths: set[Path] | None = None
    globs: list[str] | None = None
    for node in tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if not names & {"collect_ignore", "collect_ignore_glob"} or node.value is None:
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            continue
        if not isinstance(value, list | tuple):
            continue
        items = [str(v) for v in value if isinstance(v, str)]
        if "collect_ignore" in names:
            paths = {(folder / v).resolve() for v in items}
        else:
            globs = [str(folder / v) for v in items]
    return paths, globs


def _in_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() or (path / "conda-meta" / "history").is_file()


def _walk(
    root: Path,
    starts: Iterable[Path],
    norecursedirs: Sequence[str],
    wanted: Callable[[str, str], bool],
    ignored: Callable[[Path], bool],
    config: PytestConfig | None = None,
) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    allow_venv = config is not None and config.collect_in_virtualenv
    stack = [s for s in starts if s.is_dir()]
    while stack:
        directory = stack.pop()
        real = os.path.realpath(directory)
        if real in seen:  # a symlink loop or two testpaths naming one tree
            continue
        seen.add(real)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
                if entry.is_symlink() and not inside(root, path):
                    continue  # a link out of the checkout: neither walked nor read
            except OSError:
                continue
            if is_dir:
                if ignored(path) or (not allow_venv and _in_venv(path)):
                    continue
                if any(_fnmatch_ex(p, path, entry.name) for p in norecursedirs):
                    continue
                stack.append(path)
            elif is_file and not ignored(path):
                rel = path.relative_to(root).as_posix()
                if wanted(rel, entry.name):
                    found.append(rel)
    return found


def _fnmatch_ex(pattern: str, path: Path, name: str) -> bool:
    """pytest's fnmatch_ex: a pattern without `/` matches the name, else the path's tail."""
    if "/" not in pattern:
        return fnmatch.fnmatch(name, pattern)
    if not os.path.isabs(pattern):
        pattern = f"*/{pattern}"
    return fnmatch.fnmatch(str(path), pattern)


def _glob_matcher(pattern: str) -> Callable[[str, str], bool]:
    """Match a relative POSIX path (pattern with `/`) or a file name (pattern without)."""
    pattern = pattern.strip().removeprefix("./")
    regex = re.compile(_glob_to_regex(pattern))
    if "/" in pattern:
        return lambda rel, name: regex.fullmatch(rel) is not None
    return lambda rel, name: regex.fullmatch(name) is not None


def _glob_to_regex(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


_TEST_FUNCTION = re.compile(rb"^[ \t]*(?:async[ \t]+)?def[ \t]+test", re.MULTILINE)


def nominal_inputs(checkout: Path, files: Iterable[str]) -> tuple[dict[str, int], dict[str, int]]:
    """What the first plan may know of each file without running it: its size in bytes and
    how many test functions it defines (a static count of `def test...`, parameters unseen)."""
    sizes: dict[str, int] = {}
    tests: dict[str, int] = {}
    root = checkout.resolve()
    for file in files:
        try:
            if not inside(root, checkout / file):
                continue
            data = (checkout / file).read_bytes()
        except OSError:
            continue
        sizes[file] = len(data)
        tests[file] = len(_TEST_FUNCTION.findall(data))
    return sizes, tests
