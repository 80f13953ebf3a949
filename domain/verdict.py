"""From a run's state to a verdict: classification of every test, unmeasured shards, status.

The rules in `domain/rules/` are thin: each picks a `Policy` (are skips allowed, do flaky
failures fail the gate, does any failure at head fail it) and calls `judge`. The order of
precedence is fixed: a measured introduced failure fails the gate; otherwise anything
unmeasured (and not waived) leaves the gate unmeasured; while a question put to the owner is
undecided the gate is awaiting (parked once a critical one expired); only a fully measured run
with no open question can pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from release_ledger.domain.attribution import DEPENDENCIES, causes, moves_text
from release_ledger.domain.clusters import Cluster, cluster, merged
from release_ledger.domain.failures import blames_executor
from release_ledger.domain.harness import HARNESS_CHANGED, invocation_key, invocation_text
from release_ledger.domain.junit import FAILING, Report, TestCase, test_id
from release_ledger.domain.order import ARTEFACT, INTRODUCED, PENDING, order_judgement
from release_ledger.domain.resources import (
    FIGURES_NOT_BELIEVED,
    Doubt,
    OutOfMemory,
    ResourceChange,
    doubts,
    out_of_memory,
    resource_changes,
)
from release_ledger.domain.run_state import BASE, HEAD, RunState, ShardView
from release_ledger.domain.text import some
from release_ledger.domain.timing import TIMEOUT, Hang, hangs

# Question topics the gate asks; their answers change the verdict.
TOPIC_UNMEASURED = "unmeasured"
TOPIC_FLAKY = "flaky"
TOPIC_NEW_FILE = "new-test-file"
WAIVE = "waive-culprits"
BLOCK = "block"
ALLOW = "allow"


# Reasons the whole gate (not one shard) is unmeasured.
NO_TESTS = "no-tests"
LOST_COVERAGE = "skipped-at-head"
REMOVED = "removed-at-head"


@dataclass(frozen=True)
class Policy:
    skips_allowed: bool
    flaky_fails: bool
    any_failure_fails: bool = False
    lost_coverage_fails: bool = False  # tests that passed at base and are skipped/gone at head
    # A failure that passes at head with base's package set (`domain/attribution.py`) fails
    # the gate as any introduced failure does; a rule may report it instead.
    dependency_introduced_fails: bool = True
    # Files much heavier or slower at head than at base (`domain/resources.py`) fail the gate.
    resource_regressions_fail: bool = False
    # A failure exonerated with a reason (`FailureExonerated`: flaky at base in earlier gates,
    # flaky at this head, quarantined) is still introduced; a rule may list it instead.
    exonerated_fails: bool = True
    # The harness (conftest.py, pytest configuration, the test invocation) changed between
    # base and head (`domain/harness.py`): every rule shows it; a rule may fail on it.
    harness_change_fails: bool = False


@dataclass(frozen=True)
class Unmeasured:
    shard: str
    files: tuple[str, ...]
    reason: str
    culprits: tuple[str, ...] = ()
    detail: str = ""
    revision: str | None = None
    last_started: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "files": list(self.files),
            "reason": self.reason,
            "culprits": list(self.culprits),
            "detail": self.detail,
            "revision": self.revision,
            "last_started": self.last_started,
        }


@dataclass(frozen=True)
class Verdict:
    rule: str
    rule_version: int
    status: str  # passed, failed, unmeasured, awaiting, parked
    introduced: tuple[str, ...] = ()
    preexisting: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    flaky: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    # Passed at base; skipped, deselected or no longer collected at head (its file still
    # there): lost coverage.
    skipped_at_head: tuple[str, ...] = ()
    failing_at_head: tuple[str, ...] = ()
    blocking: tuple[str, ...] = ()  # tests whose failure fails the gate under this rule
    retry_shards: tuple[str, ...] = ()
    unmeasured: tuple[Unmeasured, ...] = ()
    waivers: tuple[dict[str, Any], ...] = ()
    open_questions: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    tests: dict[str, int] = field(default_factory=dict)
    # A matrix gate: each interpreter's own verdict, by label, in the run's order.
    interpreters: tuple[tuple[str, Verdict], ...] = ()
    # Which change introduced each failure rerun with base's package set (test -> code,
    # dependencies, unknown), the packages that moved, and the failures a rule reports
    # instead of failing on because the dependency change alone introduced them.
    causes: dict[str, str] = field(default_factory=dict)
    moved: tuple[str, ...] = ()
    introduced_by_dependencies: tuple[str, ...] = ()
    # The introduced failures grouped by cause (`domain/clusters.py`), the largest first.
    clusters: tuple[Cluster, ...] = ()
    # Test files deleted at head (not renamed): their tests are lost coverage.
    removed_at_head: tuple[str, ...] = ()
    # Files over the run's thresholds of memory or time at head against base.
    heavier: tuple[ResourceChange, ...] = ()
    slower: tuple[ResourceChange, ...] = ()
    # Tests that hung (ended at their file's time limit at head, confirmed alone).
    hangs: tuple[Hang, ...] = ()
    # Files that ran out of memory alone at head only (confirmed alone).
    out_of_memory: tuple[OutOfMemory, ...] = ()
    # Failures the gate would call introduced, exonerated with a reason (test -> {reason,
    # proof}), whether or not this rule still counts them as introduced.
    exonerated: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Failures at both revisions in shards, judged by a run in the project's own order
    # (`domain/order.py`: test -> preexisting, introduced, sharding-artefact, unconfirmed),
    # and those that pass in that order at head (not failures of the project's own run).
    in_order: dict[str, str] = field(default_factory=dict)
    sharding_artefacts: tuple[str, ...] = ()
    # `harness-changed`: what of the harness differs between base and head, one line each.
    harness_changed: tuple[str, ...] = ()
    # `figures-not-believed`: runs whose report or log the supervisor's figures belie.
    figures_not_believed: tuple[Doubt, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        document = self._fields()
        if self.interpreters:
            document["interpreters"] = {
                label: verdict._fields() for label, verdict in self.interpreters
            }
        return document

    def _fields(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "rule_version": self.rule_version,
            "status": self.status,
            "introduced": list(self.introduced),
            "preexisting": list(self.preexisting),
            "fixed": list(self.fixed),
            "flaky": list(self.flaky),
            "skipped": list(self.skipped),
            "skipped_at_head": list(self.skipped_at_head),
            "retry_shards": list(self.retry_shards),
            "unmeasured": [u.as_dict() for u in self.unmeasured],
            "waivers": list(self.waivers),
            "open_questions": list(self.open_questions),
            "reasons": list(self.reasons),
            "tests": dict(sorted(self.tests.items())),
        } | (self._attribution() if self.causes else {}) | self._present()

    def _present(self) -> dict[str, Any]:
        """Fields only a run that has them shows: other documents stay as they were."""
        found: dict[str, Any] = {}
        if self.clusters:
            found["clusters"] = [c.as_dict() for c in self.clusters]
        if self.removed_at_head:
            found["removed_at_head"] = list(self.removed_at_head)
        if self.heavier:
            found["heavier"] = [c.as_dict() for c in self.heavier]
        if self.slower:
            found["slower"] = [c.as_dict() for c in self.slower]
        if self.hangs:
            found["hung"] = [h.as_dict() for h in self.hangs]
        if self.out_of_memory:
            found["oom"] = [o.as_dict() for o in self.out_of_memory]
        if self.exonerated:
            found["exonerated"] = dict(sorted(self.exonerated.items()))
        if self.in_order:
            found["in_order"] = dict(sorted(self.in_order.items()))
        if self.sharding_artefacts:
            found["sharding_artefacts"] = list(self.sharding_artefacts)
        if self.harness_changed:
            found["harness_changed"] = list(self.harness_changed)
        if self.figures_not_believed:
            found["figures_not_believed"] = [d.as_dict() for d in self.figures_not_believed]
        return found

    def _attribution(self) -> dict[str, Any]:
        """Only for runs that attributed failures: other documents stay as they were."""
        return {
            "attribution": {"causes": dict(sorted(self.causes.items())), "moved": list(self.moved)},
            "introduced_by_dependencies": list(self.introduced_by_dependencies),
        }


def _outcomes(cases: Iterable[TestCase]) -> dict[str, str]:
    out: dict[str, str] = {}
    for case in cases:
        out[test_id(case)] = case.outcome
    return out


def _failures(cases: Iterable[TestCase]) -> dict[str, tuple[str | None, str | None, str]]:
    return {test_id(c): (c.message, c.text, c.outcome) for c in cases if c.outcome in FAILING}


def _report(shard: ShardView, revision: str) -> Report | None:
    latest = shard.latest(revision)
    if latest is None or not latest.assessment.measured:
        return None
    return latest.assessment.report


def shard_unmeasured(state: RunState, shard: ShardView) -> Unmeasured | None:
    """Why a leaf shard is not measured at both revisions, or None when it is."""
    for revision in (HEAD, BASE):
        files = shard.files if revision == HEAD else state.base_files_of(shard)
        if not files:
            continue  # every file is new at head: nothing to run at base
        latest = shard.latest(revision)
        if latest is None:
            return Unmeasured(shard.id, shard.files, "not-run", revision=revision)
        if not latest.assessment.measured:
            single = len(shard.files) == 1
            return Unmeasured(
                shard.id,
                shard.files,
                latest.assessment.reason or "unmeasured",
                culprits=shard.files if single else (),
                detail=latest.assessment.detail,
                revision=revision,
                last_started=latest.last_started,
            )
    return None


def retry_set(state: RunState) -> tuple[str, ...]:
    """Leaf shards whose latest attempt at either revision is unmeasurable."""
    return tuple(
        s.id
        for s in state.leaves()
        if (u := shard_unmeasured(state, s)) is not None and u.reason != "not-run"
    )


def waived_files(state: RunState) -> tuple[set[str], list[dict[str, Any]]]:
    files: set[str] = set()
    waivers: list[dict[str, Any]] = []
    for q in state.questions.values():
        if q.topic == TOPIC_UNMEASURED and q.choice == WAIVE:
            files.update(q.subject)
            waivers.append(
                {
                    "question": q.id,
                    "files": sorted(q.subject),
                    "by": q.by,
                    "state": q.state,
                    "late": q.late,
                    "position": q.decided_position,
                }
            )
    return files, waivers


@dataclass(frozen=True)
class Classification:
    """What every rule agrees on: which tests were measured and how each one classifies.

    Computed once per state (rules differ only in what they do with it), so replaying a
    run under several rules parses and classifies its reports once.
    """

    unmeasured: tuple[Unmeasured, ...]
    shard_skips: tuple[tuple[ShardView, tuple[str, ...]], ...]
    head: dict[str, str]
    base: dict[str, str]
    introduced: tuple[str, ...]
    preexisting: tuple[str, ...]
    fixed: tuple[str, ...]
    flaky: tuple[str, ...]
    skipped_at_head: tuple[str, ...] = ()
    # Each test failing at head: its report's message, text and outcome (for `clusters`).
    failures: Mapping[str, tuple[str | None, str | None, str]] = field(default_factory=dict)
    hangs: tuple[Hang, ...] = ()  # tests ended at their file's time limit, confirmed alone
    # Failures at both revisions judged in the project's order (test -> how), those that
    # passed there at head, and the files still to run in that order (`domain/order.py`).
    in_order: Mapping[str, str] = field(default_factory=dict)
    artefacts: tuple[str, ...] = ()
    order_pending: tuple[str, ...] = ()


def classify(state: RunState) -> Classification:
    cached = state.cache.get("classification")
    if isinstance(cached, Classification):
        return cached
    unmeasured: list[Unmeasured] = []
    for file, failure in sorted(state.measure_failures.items()):
        if blames_executor(failure.failure_kind, failure.infrastructure_failure):
            # the executor failed, not the file
            detail = failure.detail or failure.infrastructure_failure or ""
            unmeasured.append(Unmeasured("measure", (file,), failure.reason, (), detail))
            continue
        detail = "measuring it alone failed" + (f": {failure.detail}" if failure.detail else "")
        unmeasured.append(Unmeasured("measure", (file,), failure.reason, (file,), detail))
    head: dict[str, str] = {}
    base: dict[str, str] = {}
    head_files: set[str] = set()  # files measured at head (their shard measured at both)
    failures: dict[str, tuple[str | None, str | None, str]] = {}
    base_times: dict[str, float] = {}  # each test's own time at base (hangs name it)
    shard_skips: list[tuple[ShardView, tuple[str, ...]]] = []
    for shard in state.leaves():
        problem = shard_unmeasured(state, shard)
        if problem is not None:
            unmeasured.append(problem)
            continue
        head_report = _report(shard, HEAD)
        base_report = _report(shard, BASE)
        shard_head = _outcomes(head_report.cases) if head_report else {}
        head.update(shard_head)
        failures.update(_failures(head_report.cases) if head_report else {})
        head_files.update(shard.files)
        if base_report:
            base.update(_outcomes(base_report.cases))
            base_times.update({test_id(c): c.time or 0.0 for c in base_report.cases})
        skips = tuple(sorted(t for t, o in shard_head.items() if o == "skipped"))
        if skips:
            shard_skips.append((shard, skips))

    introduced, preexisting, fixed, flaky = [], [], [], []
    in_order: dict[str, str] = {}
    artefacts: list[str] = []
    pending: set[str] = set()
    for test, outcome in sorted(head.items()):
        file = test.split("::", 1)[0]
        if outcome == "flaky":
            flaky.append(test)
            continue
        if outcome not in FAILING:
            if base.get(test) in FAILING:
                fixed.append(test)
            continue
        alone_head = state.isolations.get((file, HEAD))
        alone_base = state.isolations.get((file, BASE))
        in_base_shard = base.get(test) in FAILING
        if in_base_shard or _fails_alone(alone_base, test):
            judged = order_judgement(state, test, in_base_shard)
            if judged == PENDING:
                pending.add(file)  # preexisting until its run in order says otherwise
            elif judged is not None:
                in_order[test] = judged
            if judged == INTRODUCED:
                introduced.append(test)
            elif judged == ARTEFACT:
                artefacts.append(test)
            else:
                preexisting.append(test)
        elif _passes_alone(alone_head, test):
            # Failed in its shard, passed when its file ran alone. A test missing from the
            # file's run alone (its file failed to collect there) is no evidence of a pass.
            flaky.append(test)
        else:
            introduced.append(test)
    found_hangs = hangs(state, base_times)
    for hang in found_hangs:  # a test ended at its file's limit never reached a report
        listed = preexisting if hang.at_both else introduced
        if hang.test not in listed:
            listed.append(hang.test)
        failures.setdefault(hang.test, ("Timeout: ended at its file's time limit", None, TIMEOUT))
    introduced.sort()
    preexisting.sort()
    lost = tuple(
        test
        for test, outcome in sorted(base.items())
        if outcome == "passed"
        and (
            head.get(test) == "skipped"
            or (test not in head and test.split("::", 1)[0] in head_files)
        )
    )
    result = Classification(
        tuple(unmeasured), tuple(shard_skips), head, base,
        tuple(introduced), tuple(preexisting), tuple(fixed), tuple(flaky), lost, failures,
        found_hangs, in_order, tuple(artefacts), tuple(sorted(pending)),
    )  # fmt: skip
    state.cache["classification"] = result
    return result


def judge(state: RunState, policy: Policy, rule: str, version: int) -> Verdict:
    """Classify every measured test and decide the status under `policy`; a matrix run is
    judged per interpreter, then the verdicts combined (`combine`)."""
    if state.matrix:
        verdicts = [
            (label, _judge_one(lane, policy, rule, version)) for label, lane in state.matrix.items()
        ]
        return combine(verdicts, rule, version)
    return _judge_one(state, policy, rule, version)


# Worst first: one interpreter's introduced failure fails the gate; an open question holds it;
# otherwise any unmeasured interpreter leaves it unmeasured; only all passed passes.
_STATUS_ORDER = ("failed", "parked", "awaiting", "unmeasured", "passed")


def combine(verdicts: Sequence[tuple[str, Verdict]], rule: str, version: int) -> Verdict:
    """One verdict for a matrix: the worst interpreter's status, each list the union of the
    interpreters' (a test named once), every unmeasured shard and reason named with its
    interpreter, and each interpreter's own verdict kept in `interpreters`."""

    def union(name: str) -> tuple[str, ...]:
        return tuple(sorted({t for _, v in verdicts for t in getattr(v, name)}))

    status = min((v.status for _, v in verdicts), key=_STATUS_ORDER.index, default="unmeasured")
    unmeasured = tuple(
        replace(
            u,
            shard=f"{label}/{u.shard}",
            detail=f"Python {label}: {u.detail}" if u.detail else f"Python {label}",
        )
        for label, v in verdicts
        for u in v.unmeasured
    )
    reasons = tuple(f"Python {label}: {r}" for label, v in verdicts for r in v.reasons)
    tests: dict[str, int] = {}
    for _, v in verdicts:
        for key, count in v.tests.items():
            tests[key] = tests.get(key, 0) + count
    first = verdicts[0][1] if verdicts else None
    return Verdict(
        rule=rule,
        rule_version=version,
        status=status,
        introduced=union("introduced"),
        preexisting=union("preexisting"),
        fixed=union("fixed"),
        flaky=union("flaky"),
        skipped=union("skipped"),
        skipped_at_head=union("skipped_at_head"),
        failing_at_head=union("failing_at_head"),
        blocking=union("blocking"),
        retry_shards=tuple(f"{label}/{s}" for label, v in verdicts for s in v.retry_shards),
        unmeasured=unmeasured,
        waivers=first.waivers if first else (),
        open_questions=first.open_questions if first else (),
        reasons=reasons,
        tests=tests,
        interpreters=tuple(verdicts),
        causes={t: c for _, v in verdicts for t, c in v.causes.items()},
        moved=tuple(sorted({m for _, v in verdicts for m in v.moved})),
        introduced_by_dependencies=union("introduced_by_dependencies"),
        clusters=merged(c for _, v in verdicts for c in v.clusters),
        removed_at_head=union("removed_at_head"),
        heavier=tuple(sorted({c for _, v in verdicts for c in v.heavier}, key=_by_file)),
        slower=tuple(sorted({c for _, v in verdicts for c in v.slower}, key=_by_file)),
        hangs=tuple(h for _, v in verdicts for h in v.hangs),
        out_of_memory=tuple(o for _, v in verdicts for o in v.out_of_memory),
        exonerated={t: x for _, v in verdicts for t, x in v.exonerated.items()},
        in_order={t: x for _, v in verdicts for t, x in v.in_order.items()},
        sharding_artefacts=union("sharding_artefacts"),
        harness_changed=tuple(dict.fromkeys(h for _, v in verdicts for h in v.harness_changed)),
        figures_not_believed=tuple(d for _, v in verdicts for d in v.figures_not_believed),
    )


def _judge_one(state: RunState, policy: Policy, rule: str, version: int) -> Verdict:
    basis = classify(state)
    unmeasured = list(basis.unmeasured)
    head, base = basis.head, basis.base
    skipped: list[str] = []
    for shard, shard_skips in basis.shard_skips:
        skipped.extend(shard_skips)
        if not policy.skips_allowed:
            unmeasured.append(
                Unmeasured(
                    shard.id,
                    shard.files,
                    "skipped",
                    detail=f"{len(shard_skips)} skipped tests: {', '.join(shard_skips[:3])}",
                    revision=HEAD,
                )
            )
    introduced, preexisting = list(basis.introduced), list(basis.preexisting)
    fixed, flaky = list(basis.fixed), list(basis.flaky)
    attributed, moved, reported_only = _attribution(state, policy, introduced)
    introduced = [t for t in introduced if t not in set(reported_only)]
    exonerated = exonerations(state, introduced)
    if not policy.exonerated_fails:
        introduced = [t for t in introduced if t not in exonerated]

    waived, waivers = waived_files(state)
    kept: list[Unmeasured] = []
    for u in unmeasured:
        if u.culprits and set(u.culprits) <= waived:
            continue
        kept.append(u)

    flaky_blocked = any(
        q.topic == TOPIC_FLAKY and q.choice == BLOCK for q in state.questions.values()
    )
    reasons: list[str] = []
    # A failure that passes in the project's own order is not one of its run (`in_order`).
    failing_at_head = sorted(
        t for t, o in head.items() if o in FAILING and t not in set(basis.artefacts)
    )
    if policy.any_failure_fails and failing_at_head:
        reasons.append(f"{len(failing_at_head)} tests fail at head (rule fails on any failure)")
    if introduced:
        reasons.append(_introduced_reason(introduced, attributed, moved))
    if flaky and (policy.flaky_fails or flaky_blocked):
        why = "the owner blocked flaky failures" if flaky_blocked else "the rule counts them"
        reasons.append(f"{len(flaky)} flaky failures fail the gate ({why})")
    lost = basis.skipped_at_head
    if lost and policy.lost_coverage_fails:
        reasons.append(
            f"{len(lost)} tests lost coverage ({LOST_COVERAGE}: passed at base, skipped or "
            f"gone at head)"
        )
    findings = _head_findings(state, policy)
    reasons += findings.reasons
    if not head and not kept:
        # Nothing measured at head (no test file, or files that collect nothing): never a pass.
        kept.append(
            Unmeasured("gate", (), NO_TESTS, detail="no test was measured at head", revision=HEAD)
        )
    # Any question asked and not yet decided can still change the verdict: it waits.
    open_questions = sorted(
        q.id
        for q in state.questions.values()
        if not q.decided and q.state in ("open", "expired", "parked")
    )
    parked = any(q.state == "parked" for q in state.questions.values() if not q.decided)
    blocking = set(introduced)
    if lost and policy.lost_coverage_fails:
        blocking.update(lost)
    if policy.any_failure_fails:
        blocking.update(failing_at_head)
    if flaky and (policy.flaky_fails or flaky_blocked):
        blocking.update(flaky)
    if reasons:
        status = "failed"
    elif kept or open_questions:
        if any(u.reason == NO_TESTS for u in kept):
            reasons.append("no test was measured at head (no-tests)")
        elif kept:
            reasons.append(f"{len(kept)} shards or files could not be measured")
        if open_questions:
            reasons.append("the owner has not answered " + ", ".join(open_questions))
        status = ("parked" if parked else "awaiting") if open_questions else "unmeasured"
    else:
        status = "passed"
    counts = {
        "head": len(head),
        "base": len(base),
        "failing_at_head": len(failing_at_head),
        "skipped": len(skipped),
        "skipped_at_head": len(lost),
    }
    return Verdict(
        rule=rule,
        rule_version=version,
        status=status,
        introduced=tuple(introduced),
        preexisting=tuple(preexisting),
        fixed=tuple(fixed),
        flaky=tuple(flaky),
        skipped=tuple(skipped),
        skipped_at_head=lost,
        failing_at_head=tuple(failing_at_head),
        blocking=tuple(sorted(blocking)),
        retry_shards=retry_set(state),
        unmeasured=tuple(kept),
        waivers=tuple(waivers),
        open_questions=tuple(open_questions),
        reasons=tuple(reasons),
        tests=counts,
        causes=attributed,
        moved=moved if attributed else (),
        introduced_by_dependencies=tuple(reported_only),
        clusters=cluster(basis.failures, introduced),
        removed_at_head=findings.removed,
        heavier=findings.heavier,
        slower=findings.slower,
        hangs=basis.hangs,
        out_of_memory=findings.blown,
        exonerated=exonerated,
        in_order=dict(basis.in_order),
        sharding_artefacts=basis.artefacts,
        harness_changed=findings.harness,
        figures_not_believed=findings.doubted,
    )


@dataclass(frozen=True)
class _Findings:
    """What head lost or grew beyond its tests' outcomes, and the reasons the rule fails."""

    removed: tuple[str, ...]
    heavier: tuple[ResourceChange, ...]
    slower: tuple[ResourceChange, ...]
    blown: tuple[OutOfMemory, ...]
    reasons: tuple[str, ...]
    harness: tuple[str, ...] = ()
    doubted: tuple[Doubt, ...] = ()


def _head_findings(state: RunState, policy: Policy) -> _Findings:
    """Removed test files and resource regressions (failing as the policy says) and files
    that ran out of memory at head only (failing under every rule: introduced)."""
    reasons: list[str] = []
    removed = state.removed_at_head
    if removed and policy.lost_coverage_fails:
        reasons.append(f"{len(removed)} test files removed at head ({REMOVED}: {some(removed)})")
    heavier, slower = resource_changes(state)
    if policy.resource_regressions_fail and (heavier or slower):
        reasons.append(_resources_reason(heavier, slower))
    blown = out_of_memory(state)
    if blown:
        named = some([b.file for b in blown])
        reasons.append(f"{len(blown)} files ran out of memory alone at head only (oom: {named})")
    harness = harness_lines(state)
    if harness and policy.harness_change_fails:
        reasons.append(
            f"the harness changed between base and head ({HARNESS_CHANGED}: {some(harness)}; "
            "the rule fails on it)"
        )
    doubted = doubts(state)
    if doubted and policy.resource_regressions_fail:
        reasons.append(
            f"{len(doubted)} runs' figures are not what the supervisor measured "
            f"({FIGURES_NOT_BELIEVED}: {some([d.where for d in doubted])}; the rule cannot "
            "judge their time from them)"
        )
    return _Findings(removed, heavier, slower, blown, tuple(reasons), harness, doubted)



def exonerations(state: RunState, introduced: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each introduced failure's exoneration (reason and the events that prove it)."""
    wanted = set(introduced)
    return {
        test: {
            "reason": x.reason,
            "position": x.position,
            "proof": [p.model_dump(mode="json") for p in x.proof],
        }
        for test, x in sorted(state.exonerations.items())
        if test in wanted
    }


def _attribution(
    state: RunState, policy: Policy, introduced: Sequence[str]
) -> tuple[dict[str, str], tuple[str, ...], list[str]]:
    """(each introduced failure's cause, the packages that moved, the failures this policy
    reports instead of failing on: those the dependency change alone introduced)."""
    attributed = {t: c.cause for t, c in causes(state).items() if t in set(introduced)}
    moved = tuple(moves_text(state.attribution.moved)) if state.attribution else ()
    by_dependencies = sorted(t for t, c in attributed.items() if c == DEPENDENCIES)
    reported = by_dependencies if not policy.dependency_introduced_fails else []
    return attributed, moved, reported


def _resources_reason(heavier: Sequence[ResourceChange], slower: Sequence[ResourceChange]) -> str:
    parts = [f"{len(heavier)} files heavier"] if heavier else []
    parts += [f"{len(slower)} files slower"] if slower else []
    return f"{' and '.join(parts)} at head than at base (rule fails on resource regressions)"


def _by_file(change: ResourceChange) -> tuple[str, float]:
    return change.file, change.head


def _introduced_reason(
    introduced: Sequence[str], attributed: dict[str, str], moved: tuple[str, ...]
) -> str:
    reason = f"{len(introduced)} failures introduced at head"
    blamed = [t for t in introduced if attributed.get(t) == DEPENDENCIES]
    if blamed:
        reason += f" ({len(blamed)} by the dependency change: {', '.join(moved[:3])}"
        reason += f" and {len(moved) - 3} more)" if len(moved) > 3 else ")"
    return reason


def _alone(isolation: Any, test: str) -> str | None:
    """The test's outcome when its file ran alone (None: not run alone, or missing there)."""
    if isolation is None or isolation.assessment.report is None:
        return None
    return _outcomes(isolation.assessment.report.cases).get(test)


def _passes_alone(isolation: Any, test: str) -> bool:
    return _alone(isolation, test) == "passed"


def _fails_alone(isolation: Any, test: str) -> bool:
    return _alone(isolation, test) in FAILING


def harness_lines(state: RunState) -> tuple[str, ...]:
    """The `harness-changed` finding: each harness file changed at head, then each place
    whose resolved test invocation differs between base and head. Runs recorded before the
    gate compared harnesses have none."""
    recorded = state.harness_changed
    if recorded is None:
        return ()
    lines = [change.line() for change in recorded]
    for (revision, where), head in sorted(state.environments.items()):
        base = state.environments.get((BASE, where))
        if revision != HEAD or base is None or head.invocation is None:
            continue
        if base.invocation is not None and invocation_key(base.invocation) != invocation_key(
            head.invocation
        ):
            lines.append(
                f"the test invocation: {invocation_text(base.invocation)} at base, "
                f"{invocation_text(head.invocation)} at head"
            )
    return tuple(lines)
