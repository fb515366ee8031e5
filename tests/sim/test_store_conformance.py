"""One conformance suite (journals.conformance), run against both journal stores: the
LMDB store on real files with fsync, and the simulator's in-memory store."""

from __future__ import annotations

import errno
import itertools
from pathlib import Path

import pytest

from journals import JournalStore
from journals.conformance import CHECKS, StoreHarness, run_check
from journals.protocol import Store
from sim.memstore import MemoryJournalStore


def lmdb_harness(directory: Path) -> StoreHarness:
    counter = itertools.count()
    failing: dict[int, bool] = {}
    keys: dict[int, int] = {}
    """id(store) -> its key (a compiled JournalStore takes no attributes of ours)."""

    def hook_for(key: int):
        def hook(phase: str) -> None:
            if failing.get(key):
                raise OSError(errno.EIO, f"injected EIO on {phase}")

        return hook

    def open_store() -> JournalStore:
        key = next(counter)
        store = JournalStore(directory / f"env{key}", 1 << 22, fault_hook=hook_for(key))
        keys[id(store)] = key
        return store

    def reopen(store: JournalStore) -> JournalStore:
        store.close()
        return JournalStore(store.path, 1 << 22)

    def fail_commits(store: JournalStore, on: bool) -> None:
        failing[keys[id(store)]] = on

    return StoreHarness(open_store, reopen, fail_commits)


def memory_harness() -> StoreHarness:
    def open_store() -> MemoryJournalStore:
        store = MemoryJournalStore()
        store.fault = lambda _batches: getattr(store, "failing", None)
        return store

    def fail_commits(store: MemoryJournalStore, on: bool) -> None:
        store.failing = "EIO" if on else None  # type: ignore[attr-defined]

    # The in-memory store is the simulated disk: a restarted group gets the same one.
    return StoreHarness(open_store, lambda store: store, fail_commits)


@pytest.fixture(params=["lmdb", "memory"])
def harness(request, tmp_path: Path) -> StoreHarness:
    return lmdb_harness(tmp_path) if request.param == "lmdb" else memory_harness()


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_store_keeps_the_protocols_promises(harness: StoreHarness, check: str) -> None:
    run_check(check, harness)


def test_both_stores_claim_the_protocol(tmp_path: Path) -> None:
    store = JournalStore(tmp_path / "env", 1 << 22)
    try:
        assert isinstance(store, Store) and isinstance(MemoryJournalStore(), Store)
    finally:
        store.close()


def test_the_suite_catches_a_store_that_breaks_a_promise() -> None:
    """The suite's own check: a store whose scan forgets key order fails it."""

    class Unordered(MemoryJournalStore):
        def scan(self, journal, selection=None):
            return reversed(list(super().scan(journal, selection)))

    broken = StoreHarness(Unordered, lambda store: store, lambda store, on: None)
    with pytest.raises(AssertionError):
        run_check("scan_is_in_key_order", broken)
