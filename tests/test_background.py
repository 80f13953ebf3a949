"""Work in the background: its result or its error handed to whoever waits, and work off the
gate's critical path (`niceness`) run lower, with every process it starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from release_ledger.ledger.background import Background


def nice_of_a_child() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.nice(0))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(done.stdout)


def test_the_result_and_the_error_reach_whoever_waits() -> None:
    assert Background(lambda: 42, "answer").result() == 42
    with pytest.raises(ZeroDivisionError):
        Background(lambda: 1 // 0, "error").result()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's nice is Linux's")
def test_work_off_the_path_and_what_it_starts_run_nicer_and_the_gate_does_not() -> None:
    gate = os.nice(0)

    def nested() -> tuple[int, int]:  # started by lowered work: lowered once, not twice
        return Background(nice_of_a_child, "inner", niceness=4).result(), nice_of_a_child()

    inner, outer = Background(nested, "outer", niceness=4).result()

    assert (inner, outer) == (min(gate + 4, 19), min(gate + 4, 19))
    assert nice_of_a_child() == gate == os.nice(0)
    assert Background(nice_of_a_child, "on the path").result() == gate
