"""Per-revision environment setup, first and cached, beside the suite's plain pytest time.

    python bench/environments.py [--projects six,more-itertools,packaging]

For each real project (two consecutive releases from their public sdists, see
`tests/realworld/sdists.py`): the head revision's environment prepared as the gate prepares it —
first with empty caches (our environment cache and uv's own, so downloads count), then again
from the cache, then the base revision's (its own venv with its own wheel installed, the
dependency layer warm in uv's cache: what a second revision costs) — and one plain `pytest`
run of the suite in head's environment. The source column is the declared source used (tox,
dependency-group, extras, requirements-file, pytest). Printed side by side in one run, with
the ratios to the plain pytest time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from release_ledger.adapters.executors import environment
from tests.realworld.sdists import release_pair

PROJECTS = {
    "six": ("1.16.0", "1.17.0"),
    "more-itertools": ("10.4.0", "10.5.0"),
    "packaging": ("24.1", "24.2"),
    "click": ("8.1.7", "8.1.8"),  # tox + a Pallets requirements folder
}


def _checkout(repo: Path, into: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(into), "HEAD"],
        check=True, capture_output=True,
    )  # fmt: skip
    return into


def measure(name: str, workdir: Path) -> dict[str, object]:
    base, head = PROJECTS[name]
    repo = release_pair(workdir / "repos", name, base, head)
    checkout = _checkout(repo, workdir / f"{name}-head")
    cache = workdir / f"{name}-envs"
    uv_cache = workdir / f"{name}-uv-cache"
    env = dict(os.environ, UV_CACHE_DIR=str(uv_cache))
    timings = {}
    for label in ("first", "cached"):
        started = time.perf_counter()
        prepared = environment.prepare(
            str(checkout), mode="auto", python=sys.executable, cache=str(cache),
            commit="head", base_env=env,
        )  # fmt: skip
        timings[label] = time.perf_counter() - started
        if prepared["status"] != "ready":
            raise RuntimeError(f"{name}: {prepared.get('error')}\n{prepared.get('log_tail')}")
    base_checkout = workdir / f"{name}-base"
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(base_checkout),
         f"v{base}"], check=True, capture_output=True,
    )  # fmt: skip
    started = time.perf_counter()
    sibling = environment.prepare(
        str(base_checkout), mode="auto", python=sys.executable, cache=str(cache),
        commit="base", base_env=env,
    )  # fmt: skip
    timings["second revision"] = time.perf_counter() - started
    runtime = prepared["runtime"]
    assert isinstance(runtime, dict)
    run_env = environment.apply_runtime(dict(os.environ), runtime)
    run_env["PYTHONDONTWRITEBYTECODE"] = "1"
    started = time.perf_counter()
    done = subprocess.run(
        [str(prepared["python"]), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"],
        cwd=checkout, env=run_env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    plain = time.perf_counter() - started
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return {
        "project": f"{name} {head}",
        "how": prepared["how"],
        "source": prepared.get("source", ""),
        "sibling": sibling["status"],
        "second_s": timings["second revision"],
        "packages": len(str(prepared["packages"]).splitlines()),
        "first_s": timings["first"],
        "cached_s": timings["cached"],
        "pytest_s": plain,
        "pytest": last,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", default=",".join(PROJECTS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-envs-") as scratch:
        rows = [measure(name, Path(scratch)) for name in args.projects.split(",")]
    header = (
        f"{'project':22} {'source':17} {'pkgs':>4} {'first':>7} {'cached':>7} {'2nd rev':>7}"
        f" {'pytest':>7}"
    )
    print(header + "  first/pytest  cached/pytest  2nd/pytest  pytest says")
    for row in rows:
        first, cached, second, plain = (
            float(row[k])  # type: ignore[arg-type]
            for k in ("first_s", "cached_s", "second_s", "pytest_s")
        )
        print(
            f"{row['project']:22} {row['source']!s:17} {row['packages']:>4} {first:7.2f} "
            f"{cached:7.2f} {second:7.2f} {plain:7.2f}  {first / plain:12.2f}  "
            f"{cached / plain:13.2f}  {second / plain:10.2f}  {row['pytest']}"
        )


if __name__ == "__main__":
    main()
