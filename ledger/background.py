"""Work started now and waited for later, in a daemon thread: what the gate overlaps with its
other steps (base's collection while head's runs, the release builds while shards run).

A daemon thread, so an interrupted gate is never held up at exit by work it no longer wants;
whoever starts one says how its subprocesses are ended (the release builds: by tag).

Work off the gate's critical path (the release builds: nothing waits for them until the
tests are done) runs `niceness` lower: on Linux a thread's nice value is its own and every
process it starts inherits it, so the environments, collections and shards the verdict waits
for take the cores first, and the builds fill the idle ones.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """`work()` running in a thread of its own; `result()` waits for it and returns what it
    returned, or raises what it raised."""

    def __init__(self, work: Callable[[], T], name: str, niceness: int = 0) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._niceness = niceness
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], T]) -> None:
        if self._niceness > 0:
            _lower_this_thread(self._niceness)
        try:
            self._value = work()
        except BaseException as error:  # handed to whoever waits for the result
            self._error = error

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the work to end (at most `timeout_s`); whether it has."""
        self._thread.join(timeout_s)
        return self.done()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def _lower_this_thread(niceness: int) -> None:
    """This thread (and what it starts) `niceness` below the gate's process, never raised
    back (a thread started by one already lowered keeps its value)."""
    with contextlib.suppress(OSError, AttributeError):  # Linux: per thread; elsewhere a no-op
        me = threading.get_native_id()
        wanted = os.getpriority(os.PRIO_PROCESS, os.getpid()) + niceness
        if os.getpriority(os.PRIO_PROCESS, me) < wanted:
            os.setpriority(os.PRIO_PROCESS, me, wanted)
