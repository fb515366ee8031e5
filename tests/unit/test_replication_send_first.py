"""A replicated active sends each commit to its replicas before its own flush: the
store calls back between the writes and the commit, the record is sealed there and
written to the replicas' sockets, and a commit that fails after going out stops the
active instead of answering (its replicas may hold what it lacks).

Real LMDB stores and real TCP sockets; no processes."""

from __future__ import annotations

import errno
import socket
import threading
from pathlib import Path

import pytest
import trio

from journals import JournalDeviceError, JournalFullError, JournalStore, WriteBatch
from journals.keys import Journal
from mrs.replication.link_out import LinkOut, write_first
from mrs.replication.stream import CommitStream, RecordingStore, ReplicatedWriter
from mrs.replication.wire import FrameReader, frame
from tests.conftest import tcp_pair


def put(key: bytes, value: bytes = b"v") -> WriteBatch:
    return WriteBatch.empty().put_raw(Journal.DQF, key, value)


@pytest.fixture
def store(tmp_path: Path):
    journals = JournalStore(tmp_path / "a", 1 << 24)
    yield journals
    journals.close()


# --------------------------------------------------------- the store's callback


def committed(store: JournalStore, key: bytes) -> bytes | None:
    """What another thread reads (the committed state, not a transaction in progress)."""
    found: list[bytes | None] = []
    reader = threading.Thread(target=lambda: found.append(store.get_raw(Journal.DQF, key)))
    reader.start()
    reader.join()
    return found[0]


def test_before_commit_runs_after_the_writes_and_before_they_are_durable(
    store: JournalStore,
) -> None:
    seen: list[tuple[bytes | None, bytes | None]] = []
    store.commit_now(put(b"old"))
    store.apply(
        [put(b"new")], lambda: seen.append((committed(store, b"old"), committed(store, b"new")))
    )
    assert seen == [(b"v", None)]  # called once, with the transaction not yet committed
    assert store.get_raw(Journal.DQF, b"new") == b"v"


def test_a_full_map_is_found_before_the_callback(tmp_path: Path) -> None:
    small = JournalStore(tmp_path / "small", 1 << 20)
    called: list[bool] = []
    with pytest.raises(JournalFullError):
        small.apply([put(b"big", b"x" * (2 << 20))], lambda: called.append(True))
    small.close()
    assert called == []


# ------------------------------------------------------ sealing before the flush


class FailingFlush:
    """A journal store whose flush fails (a device error) once `fail` is set: the
    writes went in, so the failure comes after the callback."""

    def __init__(self, store: JournalStore) -> None:
        self.store = store
        self.fail = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def apply(self, batches, before_commit=None) -> None:  # type: ignore[no-untyped-def]
        if not self.fail:
            return self.store.apply(batches, before_commit)
        if before_commit is not None:
            before_commit()
        raise JournalDeviceError("journal device failed: EIO (test)", errno.EIO)


def writer_over(store: JournalStore) -> tuple[ReplicatedWriter, CommitStream, list[str]]:
    stream = CommitStream(1, ("b",), lambda dones: [done(None) for done in dones], clock_s=float)
    stream.in_sync.add("b")
    sent: list[int] = []
    stream.on_sealed = lambda number, body: sent.append(number)
    recording = RecordingStore(store, stream)
    lost: list[str] = []
    recording.on_lost = lost.append
    return ReplicatedWriter(recording, lambda: None, stream), stream, lost


def test_a_commit_is_sealed_before_its_flush_and_answered_after_a_replica_has_it(
    tmp_path: Path,
) -> None:
    journals = JournalStore(tmp_path / "a", 1 << 24)
    writer, stream, lost = writer_over(journals)
    sealed_at: list[bytes | None] = []
    stream.on_sealed = lambda number, body: sealed_at.append(committed(journals, b"k"))
    answers: list[object] = []
    writer.submit(put(b"k"), answers.append)
    writer.commit_pending()
    assert sealed_at == [None]  # sealed while the write was not yet durable
    assert stream.number == 1 and answers == []  # durable here, not yet on a replica
    stream.ack("b", 1)
    assert answers == [None] and lost == []
    journals.close()


def test_a_commit_that_fails_after_going_out_answers_nothing_and_steps_down(
    tmp_path: Path,
) -> None:
    journals = FailingFlush(JournalStore(tmp_path / "a", 1 << 24))
    writer, stream, lost = writer_over(journals)  # type: ignore[arg-type]
    answers: list[object] = []
    journals.fail = True
    writer.submit(put(b"k"), answers.append)
    writer.submit(put(b"l"), answers.append)
    writer.commit_pending()
    assert stream.number == 1  # sent once (the batches are not sent again one by one)
    assert answers == []  # not "failed": a replica may hold it
    assert len(lost) == 1 and "EIO" in lost[0]
    journals.fail = False
    with pytest.raises(Exception, match="sent to the replicas failed"):
        writer.recording.commit_now(put(b"later"))  # nothing more is written here
    assert journals.get_raw(Journal.DQF, b"later") is None
    journals.close()


def test_the_other_replicas_are_told_once_the_commit_is_durable_here(tmp_path: Path) -> None:
    """`on_flushed` (the active writes the record to the replicas it did not write at
    the seal) comes after the flush, with the record's number; never for a commit
    whose flush failed (the active steps down instead)."""
    journals = FailingFlush(JournalStore(tmp_path / "a", 1 << 24))
    writer, stream, lost = writer_over(journals)  # type: ignore[arg-type]
    flushed: list[tuple[int, bytes | None]] = []
    stream.on_flushed = lambda number: flushed.append((number, committed(journals.store, b"k")))
    writer.submit(put(b"k"), lambda error: None)
    writer.commit_pending()
    assert flushed == [(1, b"v")]  # durable when told
    journals.fail = True
    writer.submit(put(b"l"), lambda error: None)
    writer.commit_pending()
    assert stream.number == 2 and flushed == [(1, b"v")] and len(lost) == 1
    journals.store.close()


def test_a_write_refused_before_going_out_is_answered_with_its_error(tmp_path: Path) -> None:
    journals = JournalStore(tmp_path / "a", 1 << 20)
    writer, stream, lost = writer_over(journals)
    answers: list[object] = []
    writer.submit(put(b"big", b"x" * (2 << 20)), answers.append)
    writer.submit(put(b"small"), answers.append)
    writer.commit_pending()
    assert isinstance(answers[0], JournalFullError) and lost == []
    assert stream.number == 1  # the small one alone, committed and sent
    stream.ack("b", 1)
    assert answers[1:] == [None]
    journals.close()


# ------------------------------------------------------------- the link's socket


async def test_the_loop_writes_the_next_record_at_once_and_the_task_the_rest_in_order() -> None:
    client, server = await tcp_pair()
    async with client, server:
        link = LinkOut(client, cursor=0)
        link.write_now(1, frame({"t": "commit", "n": 1}))
        assert link.cursor == 0  # the link's first frames are not sent yet
        await link.send([frame({"t": "copy", "n": 0})])
        link.write_now(1, frame({"t": "commit", "n": 1}))
        link.write_now(3, frame({"t": "commit", "n": 3}))  # does not follow: the task's
        assert link.cursor == 1
        reader = FrameReader(server)
        assert [(await reader.next())["t"] for _ in range(2)] == ["copy", "commit"]
        assert reader.buffered() is None  # record 3 was not written by the loop


async def test_what_the_socket_cannot_take_is_sent_by_the_task_first() -> None:
    client, server = await tcp_pair()
    client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    async with client, server:
        link = LinkOut(client, cursor=0)
        await link.send([])
        big = frame({"t": "commit", "n": 1, "body": b"x" * (4 << 20)})
        link.write_now(1, big)
        assert link.cursor == 1 and 0 < len(link.leftover) < len(big)
        link.write_now(2, frame({"t": "commit", "n": 2}))  # not before the rest of 1
        assert link.cursor == 1
        reader = FrameReader(server)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.send, [frame({"t": "commit", "n": 2})])
            first = await reader.next()
            second = await reader.next()
        assert (first["n"], len(first["body"]), second["n"]) == (1, 4 << 20, 2)


# ------------------------------------------------- which replicas are written first


def test_the_replica_an_answer_waits_for_is_written_first() -> None:
    """One answer waits for one in-sync replica: the one that has acknowledged the
    most is written as the record is sealed, the other one after the local flush."""
    assert write_first(("a", "b"), {"a", "b"}, {"a": 7, "b": 9}, 1) == ["b"]
    assert write_first(("a", "b"), {"a", "b"}, {"a": 9, "b": 7}, 1) == ["a"]


def test_a_replica_that_stalls_stops_being_written_first() -> None:
    """Written first, "b" acknowledged up to 9; then it stalls while "a", written after
    the flush, acknowledges 10 and 11: "a" is written first from the next record."""
    acked = {"a": 8, "b": 9}
    assert write_first(("a", "b"), {"a", "b"}, acked, 1) == ["b"]
    acked["a"] = 11
    assert write_first(("a", "b"), {"a", "b"}, acked, 1) == ["a"]


def test_in_sync_replicas_come_first_and_one_is_always_written() -> None:
    # "c" is catching up (not in sync, though further on than "a"): an answer cannot
    # wait for it, so the in-sync one is written first
    assert write_first(("a", "c"), {"a"}, {"a": 3, "c": 5}, 1) == ["a"]
    # a new term before any replica joined it answers nothing yet: still one written
    assert write_first(("a", "b"), set(), {}, 0) == ["a"]
    # five instances: answers wait for two replicas, two are written first
    acked = {"a": 4, "b": 6, "c": 5, "d": 6}
    assert write_first(("a", "b", "c", "d"), {"a", "b", "c", "d"}, acked, 2) == ["b", "d"]


async def test_a_replica_not_written_first_gets_the_record_from_its_task() -> None:
    """The loop writes record 1 to the first replica only; the second one gets it after
    the local flush, from its task when the loop could not write it there (in order,
    once)."""
    (first, first_end), (second, second_end) = await tcp_pair(), await tcp_pair()
    async with first, first_end, second, second_end:
        links = {"a": LinkOut(first, cursor=0), "b": LinkOut(second, cursor=0)}
        for link in links.values():
            await link.send([])  # the links' first frames: none here
        record = frame({"t": "commit", "n": 1})
        for name in write_first(links, {"a", "b"}, {"a": 0, "b": 0}, 1):
            links[name].write_now(1, record)
        assert (links["a"].cursor, links["b"].cursor) == (1, 0)
        await links["b"].send([record])  # what the task sends: records after its cursor
        assert (await FrameReader(first_end).next())["n"] == 1
        assert (await FrameReader(second_end).next())["n"] == 1
