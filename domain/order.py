"""The project's own order: a failure at both revisions is preexisting only in that order.

A suite can be order-coupled (a docs doctest that uses a `doctest_namespace` an autouse
fixture of `tests/conftest.py` fills, a module-level registry another file sets up): its
file passes when the files that precede it in the project's collection ran first in the same
process, and fails in a shard that does not hold them — at both revisions, which would hide a
regression there as *preexisting*. So before a failure at both revisions is called
preexisting, its file is run in the project's own order (every file that precedes it in the
collection, then it) at both revisions, unless its shard already ran it so; the in-order run
decides (`judge`): failing there at both is preexisting, passing there at base and failing at
head is introduced, passing there at head is a sharding artefact.

Pure: the order is recorded at discovery (`TestFilesDiscovered.order`), the runs in order as
`InOrderRecorded` events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from release_ledger.domain.junit import FAILING, test_id

if TYPE_CHECKING:
    from release_ledger.domain.rerun_views import InOrderView
    from release_ledger.domain.run_state import AttemptView, RunState

HEAD = "head"
BASE = "base"

# How the in-order run judged a test that failed at both revisions in shards.
PREEXISTING = "preexisting"  # fails in order at both: confirmed
INTRODUCED = "introduced"  # passes in order at base, fails in order at head
ARTEFACT = "sharding-artefact"  # passes in order at head: the shards' order made it fail
UNCONFIRMED = "unconfirmed"  # the in-order run measured nothing for it: left preexisting


def collection_order(files: Iterable[str], starts: Sequence[str]) -> list[str]:
    """`files` in the order pytest collects them: its start paths (`testpaths`) in the order
    declared, each walked depth first with each folder's entries by name (a file under no
    start path last)."""
    roots = [s.strip("/") for s in starts]

    def key(file: str) -> tuple[int, tuple[str, ...]]:
        for index, root in enumerate(roots):
            if root in ("", ".") or file == root or file.startswith(root + "/"):
                return index, tuple(file.split("/"))
        return len(roots), tuple(file.split("/"))

    return sorted(dict.fromkeys(files), key=key)


def planned_files(state: RunState, revision: str) -> list[str]:
    """The files the shards run at `revision`, in the project's order (memoised on the
    state, as its other derived values)."""
    cached = state.cache.get(f"order:{revision}")
    if isinstance(cached, list):
        return cached
    files = {f for shard in state.leaves() for f in shard.files}
    if revision == BASE:
        files &= state.base_files
    found = [f for f in state.order if f in files]
    state.cache[f"order:{revision}"] = found
    return found


def preceding(state: RunState, file: str, revision: str) -> tuple[str, ...]:
    """The files the shards run at `revision` that precede `file` in the project's order."""
    order = planned_files(state, revision)
    positions = state.cache.get(f"positions:{revision}")
    if not isinstance(positions, dict):
        positions = {f: i for i, f in enumerate(order)}
        state.cache[f"positions:{revision}"] = positions
    index = positions.get(file)
    return tuple(order[:index]) if index is not None else ()


def ran_in_order(state: RunState, attempt: AttemptView | None, file: str) -> bool:
    """Whether an attempt ran `file` after exactly the files that precede it in the project's
    order (then its own outcome is the in-order one). A result joined from reused ones is no
    single run: never in order."""
    if attempt is None or attempt.reused_from or attempt.reused_files:
        return False
    if file not in attempt.files:
        return False
    before = attempt.files[: attempt.files.index(file)]
    return tuple(before) == preceding(state, file, attempt.revision)


PENDING = "pending"  # to run in the project's order before it is judged


def _shards_in_order(state: RunState, file: str) -> bool:
    shard = next((s for s in state.leaves() if file in s.files), None)
    if shard is None:
        return False
    return all(ran_in_order(state, shard.latest(r), file) for r in (HEAD, BASE))


def order_judgement(state: RunState, test: str, failed_in_base_shard: bool) -> str | None:
    """How the project's order judges a test failing at head that failed at base in its
    shard, or only when its file ran alone at base (`failed_in_base_shard` False): None when
    the evidence already ran in that order (or the run recorded no order: judged as before),
    `PENDING` while its file is still to run in order, else `judge_in_order`'s outcome."""
    file = test.split("::", 1)[0]
    if not state.order or file not in state.order:
        return None
    in_order = _shards_in_order(state, file)
    if failed_in_base_shard and in_order:
        return None  # both shards ran it as the project does: confirmed
    if not failed_in_base_shard:
        if not preceding(state, file, BASE):
            return None  # alone is the project's order: nothing precedes it
        if in_order:
            return INTRODUCED  # its base shard passed in order, its head shard failed in order
    return judge_in_order(state, test) or PENDING


def in_order_run(
    state: RunState, revision: str, confirms: Sequence[str], unmeasured: Iterable[str] = ()
) -> tuple[str, ...]:
    """The files to run in order at `revision` to judge every file of `confirms` at once: the
    project's order up to the last of them, less the files of shards left `unmeasured` (a
    file that kills its process would take the run with it)."""
    dead = set(unmeasured) - set(confirms)
    order = [f for f in planned_files(state, revision) if f not in dead]
    last = max((order.index(f) for f in confirms if f in order), default=-1)
    return tuple(order[: last + 1])


def _outcome(view: InOrderView | None, test: str) -> str | None:
    if view is None or not view.assessment.measured or view.assessment.report is None:
        return None
    for case in view.assessment.report.cases:
        if test_id(case) == test:
            return case.outcome
    return None


def judge_in_order(state: RunState, test: str) -> str | None:
    """How the in-order runs judge a test that failed at both revisions in shards: one of
    the outcomes above, or None while its file has not run in order at both revisions."""
    file = test.split("::", 1)[0]
    head, base = state.in_order.get((file, HEAD)), state.in_order.get((file, BASE))
    if head is None or base is None:
        return None
    at_head, at_base = _outcome(head, test), _outcome(base, test)
    if at_head is None:
        return UNCONFIRMED
    if at_head not in FAILING:
        return ARTEFACT
    if at_base in FAILING:
        return PREEXISTING
    if at_base is None:
        return UNCONFIRMED
    return INTRODUCED
