"""Where uv and pip keep their shared caches is asked of them once per gate process: pip takes
a quarter second of CPU to answer, and both revisions' builds ask as they start together."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from release_ledger.adapters.executors import build_sandbox


@pytest.fixture
def fresh_answers() -> Iterator[None]:
    build_sandbox._asked_tool_cache.cache_clear()
    yield
    build_sandbox._asked_tool_cache.cache_clear()


def test_builds_starting_together_ask_pip_for_its_cache_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_answers: None
) -> None:
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    asked: list[list[str]] = []
    real_run = subprocess.run

    def slow_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        asked.append(argv)
        time.sleep(0.3)  # both callers are waiting by the time the first is answered
        return real_run(argv, **kwargs)

    monkeypatch.setattr(build_sandbox.subprocess, "run", slow_run)
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(build_sandbox._tool_cache, ["pip", "pip"]))

    assert answers == [str(tmp_path / "pip-cache")] * 2
    assert len(asked) == 1
