"""Benchmark: peak memory of `ledger junit` on a very large report (issue 13, item 8).

Generates a pytest-style report of N test cases (default 3,700,000, about 500 MB; the same
shape as bench/junit_read.py), reads it once with `ledger junit` in a fresh process, and
prints wall time, CPU time and peak RSS against the target (300 MB): the reader keeps no
column per case, only an 8-byte digest of each case's identity for duplicate detection.

    python bench/junit_memory.py [--cases N] [--keep PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from junit_read import OURS, generate, measure

TARGET_RSS_MB = 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=3_700_000, help="test cases in the report")
    parser.add_argument("--keep", type=Path, default=None, help="reuse/keep the report here")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="junit-memory-") as tmp:
        scratch = Path(tmp)
        report = options.keep or scratch / "report.xml"
        if not report.exists():
            started = time.perf_counter()
            generate(report, options.cases)
            print(f"generated in {time.perf_counter() - started:.1f} s", flush=True)
        size_mb = report.stat().st_size / 1e6
        print(f"report: {options.cases:,} test cases, {size_mb:.1f} MB", flush=True)
        wall, cpu, rss, code, out = measure(
            [sys.executable, "-c", OURS, "junit", str(report)], scratch
        )
    print(f"ledger junit: wall {wall:.2f} s  cpu {cpu:.2f} s  peak {rss:.1f} MB  exit {code}")
    print(f"  {out}")
    verdict = "met" if rss <= TARGET_RSS_MB and code == 0 else "MISSED"
    print(f"peak RSS {rss:.0f} MB [target <= {TARGET_RSS_MB} MB: {verdict}]")
    if code != 0:
        sys.exit(f"ledger junit failed (exit {code})")


if __name__ == "__main__":
    main()
