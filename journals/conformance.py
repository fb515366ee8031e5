"""Checks every journal store must pass (journals.protocol.Store), whatever it keeps data in.

As `trio.testing.check_two_way_stream` does for streams: a store author calls
`check_store(harness)`, or runs `CHECKS` one by one, with a `StoreHarness` that opens
a fresh empty store, reopens one (a restart: what was committed must still be there)
and makes commits fail (a device error: the failed commit must leave nothing). The
LMDB store and the simulator's in-memory store both run this one suite
(tests/sim/test_store_conformance.py), so what the simulator proves holds on LMDB too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from journals.protocol import Store
from journals.record import CorruptRecord, Record, encode_record
from journals.store import Journal, JournalError, Selection, WriteBatch, queue_key, seq_key


@dataclass(frozen=True)
class StoreHarness:
    """How the checks get at a store: `open()` a fresh empty one, `reopen(store)` after
    a restart (returns the store to read from), `fail_commits(store, True)` until
    `fail_commits(store, False)`."""

    open: Callable[[], Store]
    reopen: Callable[[Store], Store]
    fail_commits: Callable[[Store, bool], None]


def record(seq: int, queue: int = 10, msg_class: int = 0, body: bytes = b"") -> Record:
    return Record(
        seq=seq,
        target_group=1,
        target_queue=queue,
        source_group=2,
        source_queue=13,
        body=body or b"body %d" % seq,
        msg_class=msg_class,
        written_time_ns=1_000 + seq,
    )


def _put(store: Store, journal: Journal, *records: Record) -> None:
    batch = WriteBatch.empty()
    for one in records:
        batch.put_record(journal, queue_key(one.target_queue, one.seq), one)
    store.commit_now(batch)


def _keys(store: Store, journal: Journal, selection: Selection | None = None) -> list[bytes]:
    return [key for key, _ in store.scan(journal, selection)]


# ---------------------------------------------------------------------- the checks
def check_empty(store: Store, harness: StoreHarness) -> None:
    for journal in Journal:
        assert store.count(journal) == 0
        assert list(store.scan(journal)) == [] and list(store.raw_items(journal)) == []
        assert store.get(journal, b"absent") is None and store.get_raw(journal, b"x") is None
    assert store.meta_get("anything") is None


def check_put_and_read_back(store: Store, harness: StoreHarness) -> None:
    first = record(7, body=bytes(range(256)))
    _put(store, Journal.DQF, first)
    key = queue_key(10, 7)
    assert store.get(Journal.DQF, key) == first
    assert store.get_raw(Journal.DQF, key) == encode_record(first)
    assert store.count(Journal.DQF) == 1
    assert store.count(Journal.SAF) == 0 and store.get(Journal.SAF, key) is None
    absent = queue_key(10, 8)
    many = store.get_raw_many(Journal.DQF, [absent, key, key])
    assert many == [None, encode_record(first), encode_record(first)]
    assert store.get_raw_many(Journal.SAF, [key]) == [None]


def check_journals_are_separate_and_meta_is_by_name(store: Store, harness: StoreHarness) -> None:
    store.commit_now(
        WriteBatch.empty()
        .put_raw(Journal.META, b"epoch", b"3")
        .put_record(Journal.SAF, seq_key(1), record(1))
        .put_record(Journal.PCJ, seq_key(1), record(1, body=b"confirmed"))
    )
    assert store.meta_get("epoch") == b"3"
    assert store.get(Journal.SAF, seq_key(1)).body == b"body 1"
    assert store.get(Journal.PCJ, seq_key(1)).body == b"confirmed"


def check_scan_is_in_key_order(store: Store, harness: StoreHarness) -> None:
    seqs = [5, 1, 300, 2, 70_000]
    for seq in seqs:
        _put(store, Journal.DQF, record(seq))
    assert [r.seq for _, r in store.scan(Journal.DQF)] == sorted(seqs)
    assert [k for k, _ in store.raw_items(Journal.DQF)] == sorted(queue_key(10, s) for s in seqs)


def check_selection(store: Store, harness: StoreHarness) -> None:
    _put(store, Journal.DQF, *(record(seq, queue=10, msg_class=seq % 2) for seq in range(1, 7)))
    _put(store, Journal.DQF, *(record(seq, queue=11) for seq in range(1, 4)))
    assert len(_keys(store, Journal.DQF, Selection(prefix=11))) == 3
    assert _keys(store, Journal.DQF, Selection(prefix=12)) == []
    in_range = store.scan(Journal.DQF, Selection(prefix=10, seq_min=2, seq_max=4))
    assert [r.seq for _, r in in_range] == [2, 3, 4]
    odd = store.scan(Journal.DQF, Selection(prefix=10, msg_class=1))
    assert [r.seq for _, r in odd] == [1, 3, 5]
    timed = store.scan(Journal.DQF, Selection(time_min_ns=1_005))
    assert [r.seq for _, r in timed] == [5, 6]


def check_batches_are_atomic_and_ordered(store: Store, harness: StoreHarness) -> None:
    """Deletes before puts within a batch; a later batch of one apply sees an earlier;
    a move between journals is one commit."""
    _put(store, Journal.DQF, record(1))
    key = queue_key(10, 1)
    replace = WriteBatch.empty().delete(Journal.DQF, key).put_record(Journal.DQF, key, record(1))
    move = WriteBatch.empty().delete(Journal.DQF, key)
    move.put_record(Journal.PCJ, seq_key(1), record(1))
    store.apply([replace, move])
    assert store.count(Journal.DQF) == 0 and store.get(Journal.PCJ, seq_key(1)) == record(1)
    store.commit_now(WriteBatch.empty().delete(Journal.DQF, b"never there"))  # not an error
    assert store.count(Journal.PCJ) == 1


def check_a_failed_commit_stores_nothing(store: Store, harness: StoreHarness) -> None:
    _put(store, Journal.DQF, record(1))
    harness.fail_commits(store, True)
    doomed = (
        WriteBatch.empty()
        .delete(Journal.DQF, queue_key(10, 1))
        .put_record(Journal.DQF, queue_key(10, 2), record(2))
    )
    try:
        store.apply([doomed, WriteBatch.empty().put_raw(Journal.META, b"k", b"v")])
    except JournalError:
        pass
    else:
        raise AssertionError("a failing commit did not raise JournalError")
    finally:
        harness.fail_commits(store, False)
    assert _keys(store, Journal.DQF) == [queue_key(10, 1)] and store.meta_get("k") is None
    _put(store, Journal.DQF, record(2))  # the store works again once the fault is gone
    assert store.count(Journal.DQF) == 2


def check_commits_survive_a_reopen(store: Store, harness: StoreHarness) -> None:
    _put(store, Journal.DQF, record(1), record(2))
    store.commit_now(WriteBatch.empty().delete(Journal.DQF, queue_key(10, 1)))
    store.commit_now(WriteBatch.empty().put_raw(Journal.META, b"epoch", b"9"))
    again = harness.reopen(store)
    try:
        assert _keys(again, Journal.DQF) == [queue_key(10, 2)]
        assert again.get(Journal.DQF, queue_key(10, 2)) == record(2)
        assert again.meta_get("epoch") == b"9"
    finally:
        if again is not store:
            again.close()


def check_corrupt_values_are_never_records(store: Store, harness: StoreHarness) -> None:
    good = encode_record(record(2))
    bad = good[:-1] + bytes([good[-1] ^ 0xFF])
    store.commit_now(
        WriteBatch.empty()
        .put_record(Journal.DQF, queue_key(10, 1), record(1))
        .put_raw(Journal.DQF, queue_key(10, 2), bad)
        .put_raw(Journal.DQF, queue_key(10, 3), b"\x00")
    )
    found = list(store.scan(Journal.DQF))
    assert [type(value) for _, value in found] == [Record, CorruptRecord, CorruptRecord]
    assert found[1][1].key == queue_key(10, 2) and found[1][1].journal == "dqf"
    try:
        store.get(Journal.DQF, queue_key(10, 2))
    except CorruptRecord:
        pass
    else:
        raise AssertionError("get returned a corrupt value")
    assert store.get_raw(Journal.DQF, queue_key(10, 2)) == bad


def check_items_after_pages_by_prefix_count_and_bytes(store: Store, harness: StoreHarness) -> None:
    _put(store, Journal.SAF, *(record(seq, queue=2) for seq in range(1, 6)))
    _put(store, Journal.SAF, record(1, queue=3))
    prefix = (2).to_bytes(4, "big")
    page = store.items_after(Journal.SAF, prefix, None, 2, 1 << 20)
    assert [key for key, _ in page] == [queue_key(2, 1), queue_key(2, 2)]
    rest = store.items_after(Journal.SAF, prefix, page[-1][0], 10, 1 << 20)
    assert [key for key, _ in rest] == [queue_key(2, s) for s in (3, 4, 5)]  # not queue 3
    one = store.items_after(Journal.SAF, prefix, None, 10, 1)
    assert len(one) == 1  # always at least one, however small bytes_max
    assert store.items_after(Journal.SAF, prefix, queue_key(2, 5), 10, 1 << 20) == []


def check_keys_follow_every_commit(store: Store, harness: StoreHarness) -> None:
    """keys() (what recovery reads instead of the records) always lists exactly the
    keys raw_items() holds: after puts, deletes, a replacement, a failed commit and
    a reopen."""

    def agree(store: Store) -> list[bytes]:
        for journal in Journal:
            assert list(store.keys(journal)) == [key for key, _ in store.raw_items(journal)]
        return list(store.keys(Journal.DQF))

    assert agree(store) == []
    _put(store, Journal.DQF, *(record(seq, queue=11) for seq in (3, 1, 2)), record(9, queue=10))
    store.commit_now(
        WriteBatch.empty()
        .delete(Journal.DQF, queue_key(11, 2))
        .put_record(Journal.DQF, queue_key(11, 3), record(3, queue=11, body=b"again"))
        .put_record(Journal.PCJ, seq_key(2), record(2, queue=11))
    )
    expected = [queue_key(10, 9), queue_key(11, 1), queue_key(11, 3)]
    assert agree(store) == expected
    harness.fail_commits(store, True)
    try:
        store.commit_now(WriteBatch.empty().delete(Journal.DQF, queue_key(10, 9)))
    except JournalError:
        harness.fail_commits(store, False)
    else:
        raise AssertionError("a failing commit did not raise JournalError")
    assert agree(store) == expected
    again = harness.reopen(store)
    try:
        assert agree(again) == expected
        assert again.release_pages() >= 0  # whatever it can let go of, it never fails
    finally:
        if again is not store:
            again.close()


CHECKS: dict[str, Callable[[Store, StoreHarness], None]] = {
    check.__name__.removeprefix("check_"): check
    for check in (
        check_empty,
        check_put_and_read_back,
        check_journals_are_separate_and_meta_is_by_name,
        check_scan_is_in_key_order,
        check_selection,
        check_batches_are_atomic_and_ordered,
        check_a_failed_commit_stores_nothing,
        check_commits_survive_a_reopen,
        check_corrupt_values_are_never_records,
        check_items_after_pages_by_prefix_count_and_bytes,
        check_keys_follow_every_commit,
    )
}


def run_check(name: str, harness: StoreHarness) -> None:
    """One check on a fresh store from `harness`, closed afterwards."""
    store = harness.open()
    assert isinstance(store, Store), f"{type(store).__name__} lacks the Store protocol"
    try:
        CHECKS[name](store, harness)
    finally:
        store.close()


def check_store(harness: StoreHarness) -> None:
    """Every check, each on a fresh store; raises AssertionError at the first failure."""
    for name in CHECKS:
        run_check(name, harness)
