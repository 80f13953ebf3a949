"""How one run of tests ended, declared once for every event that records such a run (a shard
attempt, a file run alone, files run in the project's order, head's failures rerun with base's
packages): mixins of fields, like `OnInterpreter`. `domain/observed.py` fills them from an
executor's observation; their names and defaults are what recorded events already hold."""

from pydantic import BaseModel, Field


class RunEnded(BaseModel):
    """The run's exit, the evidence it left (its report and log tail, by content hash) and
    how long it took."""

    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    report_hash: str | None = None
    log_tail_hash: str | None = None
    seconds: float = 0.0
    # The size of a report over --max-report-mb; `report_hash` is then only its head.
    report_too_large: int | None = None

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.report_hash, self.log_tail_hash) if h]


class EndedAtTimeLimit(BaseModel):
    """Ended by the gate's pytest plugin at its file's time limit (`domain/timing.py`): the
    test that was running and the limit; each left out of the stored JSON when absent."""

    killed_test: str | None = Field(default=None, exclude_if=lambda value: value is None)
    time_limit_s: float | None = Field(default=None, exclude_if=lambda value: value is None)
    # A time-limit line in the log that the supervisor's figures do not bear out (the run
    # did not end as the plugin ends one, or ended before the limit): why it was not believed.
    time_limit_not_believed: str | None = Field(
        default=None, exclude_if=lambda value: value is None
    )


class PeakMemory(BaseModel):
    """Killed over its memory limit, and its peak: left out of the stored JSON when not
    (events recorded before these were read the same). `ShardAttemptRecorded` always
    recorded both, so it declares its own."""

    oom: bool = Field(default=False, exclude_if=lambda value: not value)
    rss_mb: float = Field(default=0.0, exclude_if=lambda value: not value)


class Confined(BaseModel):
    """How the suite was confined (`bwrap`, `pod`, or `none`: it ran with the gate's rights);
    empty, and left out, in events of executors that do not say and from before sandboxes."""

    sandbox: str = Field(default="", exclude_if=lambda value: value == "")
    # The local executor's resident worker that ran it, `N.K` (its worker N's K-th shard);
    # empty, and left out, for a process of its own.
    worker: str = Field(default="", exclude_if=lambda value: value == "")
