"""The store port (`adapters/store_port.Store`, issue 27 part 2): the ledger service reaches
its event store only through it, and `memory:` opens a private in-memory store that behaves as
a file ledger does — the fake for tests that need no file."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from release_ledger.adapters.event_store import EventStore
from release_ledger.adapters.store_port import Store
from release_ledger.domain import events as ev
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.errors import BrokenRun
from release_ledger.ledger.service import Ledger
from tests.ledgerkit import open_ledger, start_run


def _members(cls: type) -> set[str]:
    names = {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}
    return names | set(getattr(cls, "__annotations__", {}))


def test_the_event_store_has_every_member_of_the_port() -> None:
    store = EventStore.__init__.__code__.co_names  # attributes set in __init__
    missing = {n for n in _members(Store) if not hasattr(EventStore, n) and n not in store}
    assert missing == set()


def test_the_ledger_service_names_only_the_ports_members() -> None:
    import release_ledger.ledger.service as service

    source = inspect.getsource(service)
    used = {
        part.split("(")[0].split(".")[0].split(" ")[0]
        for part in source.split("self.store.")[1:] + source.split("store.")[1:]
    }
    outside = {n for n in used if n.isidentifier() and n not in _members(Store)}
    assert outside == set()


@pytest.mark.parametrize("where", ["memory", "file"])
def test_an_in_memory_ledger_appends_reads_seals_and_verifies_as_a_file_does(
    where: str, tmp_path: Path
) -> None:
    url = "memory:" if where == "memory" else f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = open_ledger(url)
    try:
        run = start_run(ledger)
        ledger.record(run, ev.RunCompleted)
        artifact = b"<testsuite/>"
        digest = sha256_hex(artifact)
        ledger.store.put_artifacts({digest: artifact})
        assert ledger.artifact(digest) == artifact
        assert [e.kind for _, e in ledger.store.read_events(run)] == ["RunStarted", "RunCompleted"]
        assert [r.ok for r in ledger.verify(run)] == [True]
        assert [r.run_id for r in ledger.runs()] == [run]
        lease = ledger.store.acquire_lease(run, "me", 30.0)
        assert ledger.store.lease_holder(run) is not None
        ledger.store.release_lease(lease)
        if where == "memory":
            assert not list(tmp_path.iterdir())  # nothing written anywhere
    finally:
        ledger.close()


def test_each_in_memory_ledger_is_its_own(tmp_path: Path) -> None:
    first, second = open_ledger("memory:"), open_ledger("memory:")
    try:
        start_run(first)
        assert second.runs() == [] and len(first.runs()) == 1
    finally:
        first.close()
        second.close()


def test_an_in_memory_ledger_refuses_a_tampered_seal() -> None:
    ledger: Ledger = open_ledger("memory:")
    try:
        run = start_run(ledger)
        ledger.record(run, ev.RunCompleted)
        rows = ledger.store.seal_of(run)
        assert rows
        with pytest.raises(BrokenRun):
            ledger.store.check_seal(run, ["0" * 64], rows)
    finally:
        ledger.close()


def test_nothing_outside_adapters_imports_the_stores_parts() -> None:
    """The ledger and the command line name the store through its port, its values, its
    errors and its opening only; the parts (streams, chain, index, dialects...) and the
    `EventStore` behind the port stay in `adapters/`."""
    import ast

    public = {
        "adapters.store_port", "adapters.store_records", "adapters.store_errors",
        "adapters.store_open",
    }  # fmt: skip
    root = Path(__file__).resolve().parent.parent
    reaches = []
    for package in ("ledger", "cli", "projections", "domain"):
        for file in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(file.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                for name in (n.removeprefix("release_ledger.") for n in names):
                    store = name == "adapters.event_store" or name.startswith("adapters.store_")
                    if store and name not in public:
                        reaches.append(f"{file.relative_to(root)}: {name}")
    assert reaches == []
