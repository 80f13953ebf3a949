"""Overhead of LocalExecutor.run against a bare subprocess.run of the same pytest command.

    python bench/local_executor.py [RUNS]

Both run the same one-file shard in the same clean worktree, interleaved; the executor adds
the session, the RSS watchdog (50 ms polls with a memory limit), log capture and cleanup.
Prints median wall seconds for each, their ratio, and the gate process's CPU per run.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from release_ledger.adapters.executors.local import LocalExecutor
from release_ledger.adapters.git import Worktrees
from release_ledger.domain.execution import DEFAULT_PYTEST_COMMAND, ShardRun, expand_command
from tests.gitrepo import head, make_repo

TEST_FILE = "import time\n\n" + "".join(
    f"def test_{i}():\n    time.sleep(0.01)\n    assert sum(range(1000)) == 499500\n\n"
    for i in range(30)
)


def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = make_repo(root, {"tests/test_bench.py": TEST_FILE})
        sha = head(repo)
        executor = LocalExecutor(repo, Worktrees(repo, root / "cache"), work_dir=root / "work")
        checkout = executor.checkout_for(sha)
        shard = ShardRun(
            run_id="bench",
            shard_id="s",
            attempt=1,
            revision="head",
            commit=sha,
            files=("tests/test_bench.py",),
            memory_limit_mb=4096,
        )
        bare_s: list[float] = []
        exec_s: list[float] = []
        exec_cpu: list[float] = []
        bare_cpu: list[float] = []
        for i in range(runs + 1):
            junit = root / f"bare-{i}.xml"
            argv = expand_command(
                DEFAULT_PYTEST_COMMAND,
                python=sys.executable,
                junit=str(junit),
                files=shard.files,
            )
            cpu, started = time.process_time(), time.perf_counter()
            done = subprocess.run(argv, cwd=checkout, capture_output=True, check=False)
            bare = time.perf_counter() - started
            bare_cpu_run = time.process_time() - cpu
            assert done.returncode == 0, done.stdout[-2000:]
            cpu, started = time.process_time(), time.perf_counter()
            seen = executor.run(shard)
            took = time.perf_counter() - started
            executor_cpu_run = time.process_time() - cpu
            assert seen.exit_code == 0, seen.log_tail[-2000:]
            if i == 0:
                continue  # warm-up
            bare_s.append(bare)
            exec_s.append(took)
            bare_cpu.append(bare_cpu_run)
            exec_cpu.append(executor_cpu_run)
        executor.close()
    bare_med, exec_med = statistics.median(bare_s), statistics.median(exec_s)
    print(f"runs: {runs} (one 30-test pytest shard each, interleaved)")
    print(f"subprocess.run median wall: {bare_med:.3f} s")
    print(f"LocalExecutor median wall:  {exec_med:.3f} s  (memory limit set: 50 ms RSS polls)")
    print(f"ratio executor/bare: {exec_med / bare_med:.3f}")
    print(
        f"gate-process CPU per run: bare {statistics.median(bare_cpu) * 1000:.1f} ms, "
        f"executor {statistics.median(exec_cpu) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
