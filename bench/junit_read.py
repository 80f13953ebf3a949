"""Benchmark: `ledger junit` against junitparser (lxml) on one large pytest report.

Generates a pytest-style (xunit1) report of N test cases (default 1,000,000, about 140 MB),
then reads it alternately with `ledger junit` and with junitparser, each in a fresh process,
several rounds. Prints wall time and peak RSS of every run, the ratio of median wall times
(ours / junitparser; target <= 1.0) and our peak RSS (target <= 256 MB).

    python bench/junit_read.py [--cases N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = "from release_ledger.cli.main import main; main()"
JUNITPARSER = """
import sys
from junitparser import Error, Failure, JUnitXml, Skipped
tests = failures = errors = skipped = 0
for suite in JUnitXml.fromfile(sys.argv[1]):
    for case in suite:
        tests += 1
        kinds = {type(result) for result in case.result}
        failures += Failure in kinds
        errors += Error in kinds
        skipped += Skipped in kinds and not kinds & {Failure, Error}
print(f"{tests} tests, {failures} failures, {errors} errors, {skipped} skipped")
"""
TARGET_RATIO = 1.0
TARGET_RSS_MB = 256


def generate(path: Path, cases: int, per_file: int = 250, per_class: int = 25) -> None:
    """Write a report as pytest --junitxml does (one line, file/line attributes)."""
    failures = sum(1 for i in range(cases) if i % 1000 == 999)
    skips = sum(1 for i in range(cases) if i % 500 == 250)
    with open(path, "w", encoding="utf-8") as out:
        out.write('<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">')
        out.write(
            f'<testsuite name="pytest" errors="0" failures="{failures}" skipped="{skips}" '
            f'tests="{cases}" time="1234.5" timestamp="2026-11-30T09:00:00" hostname="bench">'
        )
        batch: list[str] = []
        for i in range(cases):
            module = f"tests/p{i // per_file % 16:02d}/test_m{i // per_file:05d}"
            classname = module.replace("/", ".") + f".TestGroup{i % per_file // per_class:02d}"
            attrs = (
                f'classname="{classname}" name="test_case_{i:07d}" file="{module}.py" '
                f'line="{i % per_file * 4 + 10}" time="0.{i % 997:03d}"'
            )
            if i % 1000 == 999:
                batch.append(
                    f'<testcase {attrs}><failure message="assert 1 == 2">def test():\n'
                    f"&gt;   assert 1 == 2\nE   assert 1 == 2</failure></testcase>"
                )
            elif i % 500 == 250:
                batch.append(
                    f'<testcase {attrs}><skipped type="pytest.skip" message="later">'
                    f"{module}.py:10: later</skipped></testcase>"
                )
            else:
                batch.append(f"<testcase {attrs} />")
            if len(batch) == 10_000:
                out.write("".join(batch))
                batch.clear()
        out.write("".join(batch))
        out.write("</testsuite></testsuites>")


def measure(argv: list[str], scratch: Path) -> tuple[float, float, float, int, str]:
    """Run one reader in a fresh process: wall and CPU seconds, peak RSS (MB), exit code,
    stdout. CPU time is printed too: on a shared machine it varies less than wall time."""
    out_path = scratch / "stdout.txt"
    with open(out_path, "wb") as out:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, cwd=REPO)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss / 1024, process.returncode, out_path.read_text().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1_000_000, help="test cases in the report")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="junit-bench-") as tmp:
        scratch = Path(tmp)
        report = scratch / "report.xml"
        started = time.perf_counter()
        generate(report, options.cases)
        size_mb = report.stat().st_size / 1e6
        print(
            f"report: {options.cases:,} test cases, {size_mb:.1f} MB "
            f"(generated in {time.perf_counter() - started:.1f} s)",
            flush=True,
        )
        readers = {
            "ledger junit": [sys.executable, "-c", OURS, "junit", str(report)],
            "junitparser": [sys.executable, "-c", JUNITPARSER, str(report)],
        }
        walls: dict[str, list[float]] = {name: [] for name in readers}
        cpus: dict[str, list[float]] = {name: [] for name in readers}
        peaks: dict[str, list[float]] = {name: [] for name in readers}
        for round_ in range(1, options.rounds + 1):
            for name, argv in readers.items():
                wall, cpu, rss, code, out = measure(argv, scratch)
                walls[name].append(wall)
                cpus[name].append(cpu)
                peaks[name].append(rss)
                print(
                    f"round {round_}  {name:<13} wall {wall:6.2f} s  cpu {cpu:6.2f} s  "
                    f"peak {rss:7.1f} MB  exit {code}  {out}",
                    flush=True,
                )
                if code != 0:
                    sys.exit(f"{name} failed (exit {code})")

    ours, theirs = (statistics.median(walls[name]) for name in readers)
    ratio = ours / theirs
    ours_rss, theirs_rss = (max(peaks[name]) for name in readers)
    ours_cpu, theirs_cpu = (statistics.median(cpus[name]) for name in readers)
    print()
    print(f"median wall: ledger junit {ours:.2f} s, junitparser {theirs:.2f} s")
    print(
        f"median cpu:  ledger junit {ours_cpu:.2f} s, junitparser {theirs_cpu:.2f} s "
        f"(ratio {ours_cpu / theirs_cpu:.2f})"
    )
    print(
        f"ratio (ledger junit / junitparser): {ratio:.2f}  "
        f"[target <= {TARGET_RATIO:.1f}: {'met' if ratio <= TARGET_RATIO else 'MISSED'}]"
    )
    print(
        f"peak RSS: ledger junit {ours_rss:.0f} MB, junitparser {theirs_rss:.0f} MB  "
        f"[target <= {TARGET_RSS_MB} MB: {'met' if ours_rss <= TARGET_RSS_MB else 'MISSED'}]"
    )


if __name__ == "__main__":
    main()
