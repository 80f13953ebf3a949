"""Synthetic but valid gate runs: the events a real run appends and the JUnit reports they cite.

    run = synthetic_run(random.Random(7), "ab" * 16, files=6, tests_per_file=2, shards=2)
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)

Outcomes, unmeasurable attempts (retried), isolations of new failures, owner questions and
checks are drawn from the random generator, so one seed always gives the same run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from xml.sax.saxutils import quoteattr

from release_ledger.domain import events as ev
from release_ledger.domain.chain import sha256_hex

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HEAD_SHA = "a" * 40
BASE_SHA = "b" * 40


@dataclass
class SyntheticRun:
    run_id: str
    events: list[ev.Event] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)


def junit_report(cases: list[tuple[str, str, str, float]]) -> bytes:
    """A pytest-style report: (file, test name, outcome, seconds) per case."""
    failures = sum(1 for c in cases if c[2] == "failed")
    skipped = sum(1 for c in cases if c[2] == "skipped")
    parts = [
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">',
        f'<testsuite name="pytest" errors="0" failures="{failures}" skipped="{skipped}" '
        f'tests="{len(cases)}" time="1.0">',
    ]
    for file, name, outcome, seconds in cases:
        classname = file[:-3].replace("/", ".")
        head = (
            f"<testcase classname={quoteattr(classname)} name={quoteattr(name)} "
            f'file={quoteattr(file)} time="{seconds:.3f}"'
        )
        if outcome == "failed":
            parts.append(f'{head}><failure message="assert 0">E assert 0</failure></testcase>')
        elif outcome == "skipped":
            parts.append(f'{head}><skipped type="pytest.skip" message="later"/></testcase>')
        else:
            parts.append(f"{head}/>")
    parts.append("</testsuite></testsuites>")
    return "".join(parts).encode()


def synthetic_run(
    rng: random.Random,
    run_id: str,
    *,
    files: int = 4,
    tests_per_file: int = 2,
    shards: int = 2,
    p_fail: float = 0.1,
    p_skip: float = 0.05,
    p_unmeasured: float = 0.1,
    questions: int = 1,
    checks: int = 1,
    rule: str = "default",
    start: datetime = T0,
    complete: bool = True,
    pad_to: int | None = None,
) -> SyntheticRun:
    """One run's events in the order the gate appends them, and its report artifacts."""
    run = SyntheticRun(run_id)
    clock = iter(start + timedelta(seconds=i) for i in range(10**9))

    def add(cls: type[ev.Event], **fields: object) -> None:
        run.events.append(cls(run_id=run_id, at=next(clock), **fields))

    names = [f"tests/test_{run_id[:4]}_{i:04d}.py" for i in range(files)]
    new_at_head = {n for n in names if rng.random() < 0.1}
    add(
        ev.RunStarted,
        repo="/srv/repo",
        head_ref="main",
        base_ref="v1.0",
        head=HEAD_SHA,
        base=BASE_SHA,
        rule=rule,
        executor="local",
        command=["{python}", "-m", "pytest", "--junitxml={junit}", "{files}"],
        options={"shards": shards, "rounds": 2},
        tool_version="0.1.0",
    )
    add(ev.TestFilesDiscovered, files=names, missing_at_base=sorted(new_at_head))
    cost: dict[str, tuple[float, float]] = {}
    for name in names:
        cost[name] = (float(rng.randint(30, 300)), round(rng.uniform(0.1, 30.0), 3))
        add(ev.FileMeasured, file=name, rss_mb=cost[name][0], seconds=cost[name][1], exit_code=0)

    planned = [names[i::shards] for i in range(shards)]
    planned = [p for p in planned if p]
    add(
        ev.ShardsPlanned,
        budget_mb=8192.0,
        count=len(planned),
        shards=[
            ev.PlannedShard(
                id=f"s{i + 1:02d}",
                files=p,
                rss_mb=max(cost[f][0] for f in p),
                seconds=round(sum(cost[f][1] for f in p), 3),
            )
            for i, p in enumerate(planned)
        ],
    )
    outcome = {}
    for name in names:
        for t in range(tests_per_file):
            for revision in ("head", "base"):
                r = rng.random()
                outcome[(name, t, revision)] = (
                    "failed" if r < p_fail else "skipped" if r < p_fail + p_skip else "passed"
                )

    def report_for(files: list[str], revision: str) -> tuple[bytes, int]:
        cases = [
            (f, f"test_{t}", outcome[(f, t, revision)], round(rng.uniform(0.001, 2.0), 3))
            for f in files
            for t in range(tests_per_file)
        ]
        exit_code = 1 if any(c[2] == "failed" for c in cases) else 0
        return junit_report(cases), exit_code

    for index, shard_files in enumerate(planned):
        shard = f"s{index + 1:02d}"
        for revision in ("head", "base"):
            run_files = shard_files if revision == "head" else [
                f for f in shard_files if f not in new_at_head
            ]  # fmt: skip
            if not run_files:
                continue
            attempt = 1
            if rng.random() < p_unmeasured:  # died without a report; retried once
                add(
                    ev.ShardAttemptRecorded,
                    shard=shard,
                    attempt=attempt,
                    revision=revision,
                    files=run_files,
                    exit_code=None,
                    signal=9,
                    seconds=1.0,
                )
                attempt += 1
            report, exit_code = report_for(run_files, revision)
            digest = sha256_hex(report)
            run.artifacts[digest] = report
            add(
                ev.ShardAttemptRecorded,
                shard=shard,
                attempt=attempt,
                revision=revision,
                files=run_files,
                exit_code=exit_code,
                report_hash=digest,
                rss_mb=float(rng.randint(50, 500)),
                seconds=round(rng.uniform(1, 100), 3),
            )
    isolated = sorted(
        {
            name
            for (name, t, revision), o in outcome.items()
            if revision == "head" and o == "failed" and outcome[(name, t, "base")] != "failed"
        }
    )[:3]
    for name in isolated:
        for revision in ("head", "base"):
            if revision == "base" and name in new_at_head:
                continue
            report, exit_code = report_for([name], revision)
            digest = sha256_hex(report)
            run.artifacts[digest] = report
            add(
                ev.IsolationRecorded,
                file=name,
                revision=revision,
                exit_code=exit_code,
                report_hash=digest,
                seconds=1.5,
            )
    for q in range(questions):
        qid = f"q{q + 1}"
        add(
            ev.QuestionAsked,
            question_id=qid,
            topic=rng.choice(["flaky", "unmeasured", "new-test-file"]),
            text="Should the gate block on this?",
            options=["allow", "block"],
            recommended="allow",
            impact=rng.choice(["low", "high", "critical"]),
            deadline=start + timedelta(hours=1),
            subject=names[:1],
        )
        fate = rng.random()
        if fate < 0.4:
            add(ev.QuestionAnswered, question_id=qid, choice=rng.choice(["allow", "block"]),
                by="owner@example.org")  # fmt: skip
        elif fate < 0.7:
            add(ev.QuestionExpired, question_id=qid, deadline=start + timedelta(hours=1))
            add(ev.RecommendationTaken, question_id=qid, choice="allow")
    for c in range(checks):
        add(
            ev.CheckRecorded,
            name=f"check-{c + 1}",
            verdict=rng.choice(["pass", "fail", "unmeasured"]),
            value=f"{rng.randint(0, 100)}%",
            by="ci",
        )
    if pad_to is not None:
        extra = 0
        while len(run.events) + int(complete) < pad_to:
            extra += 1
            add(ev.CheckRecorded, name=f"extra-{extra}", verdict="pass", value="", by="ci")
    if complete:
        add(ev.RunCompleted)
    return run


def interleave(rng: random.Random, runs: list[SyntheticRun]) -> list[tuple[str, ev.Event]]:
    """All runs' events in one random global order that keeps each run's own order."""
    queues = [list(r.events) for r in runs]
    order: list[tuple[str, ev.Event]] = []
    while any(queues):
        live = [i for i, q in enumerate(queues) if q]
        i = rng.choice(live)
        take = rng.randint(1, 4)
        for event in queues[i][:take]:
            order.append((runs[i].run_id, event))
        queues[i] = queues[i][take:]
    return order
