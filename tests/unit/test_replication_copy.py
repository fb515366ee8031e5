"""A full copy streamed in bounded slices while the active goes on committing
(mrs.replication.active `_full_copy`), and the replica that takes it: whole again,
and a candidate again, only once it has replayed the records up to the one the copy
names. Real LMDB stores on both sides; the real rejoin is
tests/process/test_replication.py."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
import trio
import trio.testing

from journals import JournalDeviceError, JournalStore, WriteBatch
from journals.keys import Journal
from mrs import limits
from mrs.config.instance_types import InstanceConfig
from mrs.core.seqspace import BOOTS_KEY
from mrs.replication.active import Active
from mrs.replication.replica import Replica
from mrs.replication.stream import CommitStream, RecordingStore
from mrs.replication.wire import FrameReader, LinkBroken, frame

SLICE_BYTES = 16 << 10
SLICE_ITEMS = 20
REPLICATION_KEYS = (
    b"replication.position",
    b"replication.term",
    b"replication.copy_upto",
    b"replication.led",
    b"replication.copy_partial",
)
"""Each instance's own marks (mrs.replication.replica): not part of the group's state."""


def _message(body: bytes) -> dict:
    return msgpack.unpackb(body[4:], raw=False)


def _active(journals: JournalStore, recording: type[RecordingStore] = RecordingStore) -> Active:
    me = InstanceConfig("a", "127.0.0.1", 1, "127.0.0.1", 2, Path("a"))
    stream = CommitStream(term=2, replicas=("b",), deliver=lambda dones: None, clock_s=lambda: 0.0)
    store = recording(journals, stream)
    return Active(
        group_id=1,
        me=me,
        replicas=(),
        coordinator=None,  # type: ignore[arg-type]  # the copy asks it nothing
        term=2,
        lease_ttl_s=3,
        store=store,
        stream=stream,
        on_step_down=lambda reason: None,
    )


def _commit(active: Active, batch: WriteBatch) -> None:
    """What the inline writer does: apply (sealed into the stream on its way)."""
    active.store.apply([batch])


def _contents(store: JournalStore) -> dict:
    return {
        journal: [
            (key, value)
            for key, value in store.raw_items(journal)
            if journal is not Journal.META or key not in REPLICATION_KEYS
        ]
        for journal in Journal
    }


@pytest.fixture
def stores(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("mrs.replication.active.REPLICATION_COPY_SLICE_BYTES", SLICE_BYTES)
    monkeypatch.setattr("mrs.replication.active.REPLICATION_COPY_SLICE_ITEMS_MAX", SLICE_ITEMS)
    monkeypatch.setattr("mrs.replication.replica.REPLICATION_COPY_SLICE_ITEMS_MAX", SLICE_ITEMS)
    active, replica = (JournalStore(tmp_path / name, 1 << 26) for name in ("a", "b"))
    batch = WriteBatch.empty()
    for i in range(300):
        batch.put_raw(Journal.DQF, b"q%05d" % i, bytes([i % 251]) * (i * 7 % 2000))
    for i in range(50):
        batch.put_raw(Journal.PCJ, b"p%05d" % i, b"confirmed")
    batch.put_raw(Journal.META, b"some.meta", b"1")
    active.commit_now(batch)
    yield active, replica
    active.close()
    replica.close()


def test_a_copy_streamed_while_commits_go_on_ends_as_the_active(stores) -> None:
    active_store, replica_store = stores
    active = _active(active_store)
    replica = Replica(1, "b", replica_store)
    assert replica.check_hello({"t": "hello", "group": 1, "term": 2, "from": "a"}) is None
    _commit(active, WriteBatch.empty().put_raw(Journal.DQF, b"q-before", b"x"))
    frames = active._full_copy()
    number = active.stream.number  # the copy's number: sealed before the first slice
    copied: dict[bytes, bytes] = {}
    answer = None
    for step, body in enumerate(frames):
        message = _message(body)
        items = message["items"]
        assert len(items) <= SLICE_ITEMS
        assert sum(len(v) for _, _, v in items) <= SLICE_BYTES + 2000  # + one record
        copied.update((k, v) for _, k, v in items)
        answer = replica.receive(message)
        # the active commits between two slices (the event loop runs): behind the
        # slice read, ahead of it, deleting, overwriting and adding
        batch = WriteBatch.empty()
        batch.delete(Journal.DQF, b"q%05d" % (step * 37 % 300))
        batch.put_raw(Journal.DQF, b"q%05d" % (299 - step), b"overwritten %d" % step)
        batch.put_raw(Journal.DQF, b"q%05d.%d" % (step * 13 % 300, step), b"added")
        batch.put_raw(Journal.PCJ, b"p%05d" % (step % 50), b"again %d" % step)
        _commit(active, batch)
    last = _message(body)
    assert last["last"] and last["n"] == number and last["upto"] > number
    assert answer == {"t": "ack", "n": number}
    # slices read after commits made after the copy's number hold some of them
    assert any(value.startswith(b"overwritten") for value in copied.values())
    assert not replica.holds_journals  # a mix of two moments: no candidate
    assert not Replica(1, "b", replica_store).holds_journals  # after a restart too
    for record in active.stream.records_after(number) or []:
        message = _message(record)
        assert replica.receive(message) == {"t": "ack", "n": message["n"]}
        assert replica.holds_journals == (message["n"] >= last["upto"])
    assert replica.position == (2, active.stream.number)
    assert _contents(replica_store) == _contents(active_store)


def test_each_slice_is_read_when_the_one_before_is_sent(stores) -> None:
    """The journals are not read whole up front: one short read per slice."""
    active_store, _ = stores
    reads: list[int] = []

    class Counting(RecordingStore):
        def items_after(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            reads.append(1)
            return active_store.items_after(*args, **kwargs)

    frames = _active(active_store, Counting)._full_copy()
    assert reads == []
    read_before: list[int] = []
    for _ in frames:
        read_before.append(len(reads))
    assert len(read_before) >= 350 // SLICE_ITEMS  # 351 records, 20 a slice at most
    assert read_before[0] <= 2  # not everything read up front
    # a slice's reads: one, or two across a journal's end (plus empty journals)
    assert all(b - a <= len(Journal) for a, b in zip(read_before, read_before[1:], strict=False))
    assert limits.REPLICATION_COPY_SLICE_BYTES <= limits.REPLICATION_FRAME_BYTES_MAX // 4


def test_a_copy_without_upto_is_whole_at_once(stores) -> None:
    """From an active before `upto` (read in one pass): a candidate at once."""
    _, replica_store = stores
    replica = Replica(1, "b", replica_store)
    replica.check_hello({"t": "hello", "group": 1, "term": 3, "from": "a"})
    items = [["dqf", b"k", b"v"]]
    answer = replica.receive({"t": "copy", "term": 3, "n": 5, "items": items, "last": True})
    assert answer == {"t": "ack", "n": 5} and replica.holds_journals


def test_a_copy_cut_off_with_its_link_is_not_applied_with_the_next_one(stores) -> None:
    """The first slices of a copy whose link broke are dropped when the next link
    starts: applied with the next copy's, a key deleted in between would come back."""
    _, replica_store = stores
    replica = Replica(1, "b", replica_store)

    async def link(messages: list[dict]) -> None:
        ours, theirs = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(replica._handle, theirs)
            for message in messages:
                await ours.send_all(frame(message))
            await FrameReader(ours).next()  # the replica's hello
            await ours.aclose()  # the link breaks

    hello = {"t": "hello", "group": 1, "term": 2, "from": "a"}
    gone = {"t": "copy", "term": 2, "n": 4, "items": [["dqf", b"gone", b"v"]], "last": False}
    trio.run(link, [hello, gone])
    kept = {"t": "copy", "term": 2, "n": 9, "items": [["dqf", b"kept", b"v"]], "last": False}
    last = {"t": "copy", "term": 2, "n": 9, "items": [], "last": True, "upto": 9}
    trio.run(link, [hello, kept, last])
    assert replica.position == (2, 9)
    assert replica_store.get_raw(Journal.DQF, b"kept") == b"v"
    assert replica_store.get_raw(Journal.DQF, b"gone") is None


def test_a_copy_is_applied_slice_by_slice_and_a_lost_link_starts_it_over(stores) -> None:
    """The replica holds one slice in memory, not the journals: each slice is in its
    LMDB as it comes, under a partial mark that keeps it from campaigning; a copy cut
    halfway leaves position (0, 0), so the next hello gets a whole copy, which wipes
    the half first. The active's own replication marks (it led term 2) are not taken."""
    active_store, replica_store = stores
    active_store.commit_now(
        WriteBatch.empty().put_raw(Journal.META, b"replication.led", b"\0" * 7 + b"\2")
    )
    replica_store.commit_now(WriteBatch.empty().put_raw(Journal.DQF, b"stale", b"old history"))
    replica = Replica(1, "b", replica_store)
    replica.check_hello({"t": "hello", "group": 1, "term": 2, "from": "a"})
    frames = [_message(body) for body in _active(active_store)._full_copy()]
    assert len(frames) > 3
    for message in frames[:2]:
        assert replica.receive(message) is None
    assert replica_store.get_raw(Journal.DQF, b"stale") is None  # wiped by the first slice
    first_key = frames[0]["items"][0][1]
    assert replica_store.get_raw(Journal(frames[0]["items"][0][0]), first_key) is not None
    assert not replica.holds_journals and replica.position == (0, 0)
    reopened = Replica(1, "b", replica_store)  # the link lost, the replica restarted
    assert not reopened.holds_journals and reopened.position == (0, 0)
    reopened.check_hello({"t": "hello", "group": 1, "term": 2, "from": "a"})
    answers = [reopened.receive(message) for message in frames]
    assert answers[-1] == {"t": "ack", "n": frames[-1]["n"]}
    assert reopened.holds_journals and reopened.led == 0
    assert Replica(1, "b", replica_store).led == 0  # the active's mark was not copied
    assert _contents(replica_store) == _contents(active_store)


class CountingDeletes:
    """The replica's journal store, noting the deletes of each transaction; it fails
    the transaction `fail_at` (1-based) with a device error, as a crash halfway would
    leave the journals."""

    def __init__(self, store: JournalStore, fail_at: int = 0) -> None:
        self.store = store
        self.fail_at = fail_at
        self.deletes: list[int] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def apply(self, batches, before_commit=None) -> None:  # type: ignore[no-untyped-def]
        self.deletes.append(sum(len(batch.deletes) for batch in batches))
        if len(self.deletes) == self.fail_at:
            raise JournalDeviceError("journal device failed: EIO (test)", 5)
        self.store.apply(batches, before_commit)

    def commit_now(self, batch: WriteBatch) -> None:
        self.apply([batch])


def _full_of_its_own(replica_store: JournalStore) -> None:
    batch = WriteBatch.empty()
    for i in range(120):
        batch.put_raw(Journal.DQF, b"old%05d" % i, b"stale")
    batch.put_raw(Journal.META, b"replication.led", b"\0" * 7 + b"\1")
    batch.put_raw(Journal.META, BOOTS_KEY, b"\0" * 8)  # it was an active once
    replica_store.commit_now(batch)


def test_a_full_copy_wipes_the_replica_a_slice_of_keys_at_a_time(stores) -> None:
    """A replica never lists every key it holds at once: the wipe before a full copy
    deletes at most a slice of keys a transaction, and the copy then ends as the active."""
    active_store, replica_store = stores
    _full_of_its_own(replica_store)
    counting = CountingDeletes(replica_store)
    replica = Replica(1, "b", counting)  # type: ignore[arg-type]
    assert replica.check_hello({"t": "hello", "group": 1, "term": 2, "from": "a"}) is None
    for body in _active(active_store)._full_copy():
        replica.receive(_message(body))
    assert max(counting.deletes) <= SLICE_ITEMS
    assert sum(counting.deletes) >= 120  # every key of its own went
    assert _contents(replica_store) == _contents(active_store)
    assert replica.holds_journals and replica.led == 0
    assert replica_store.meta_get("replication.led") is None


def test_a_wipe_cut_short_leaves_journals_that_are_no_candidate(stores) -> None:
    _, replica_store = stores
    _full_of_its_own(replica_store)
    replica = Replica(1, "b", CountingDeletes(replica_store, fail_at=4))  # type: ignore[arg-type]
    assert replica.holds_journals  # before: its own journals, its own boots
    assert replica.check_hello({"t": "hello", "group": 1, "term": 2, "from": "a"}) is None
    with pytest.raises(LinkBroken):  # the store failed: the link drops, as a crash would
        replica.receive({"t": "copy", "term": 2, "n": 5, "items": [], "last": True})
    assert replica_store.get_raw(Journal.DQF, b"old00119") is not None  # cut short
    restarted = Replica(1, "b", replica_store)
    assert not restarted.holds_journals and restarted.position == (0, 0)
