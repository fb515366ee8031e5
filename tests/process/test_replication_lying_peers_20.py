"""Peers that lie to a replicated group's replication link, or send it nonsense, over
real TCP sockets, against the real `Active` and `Replica` on real LMDB journals (no
etcd: the coordinator's one call the active makes here is recorded in memory).

What a user depends on: an answer goes out only once a majority of the group's disks
holds its commit, so nothing another process says on the link may count for a disk
that does not hold it; and a replica refuses what it cannot take whole, says why in
one line of its own log (and to the active, which logs it too), and keeps its
journals as they were.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import trio

from journals import JournalStore, WriteBatch
from journals.batch import encode_batches
from journals.keys import Journal
from mrs.config.instance_types import InstanceConfig
from mrs.replication.active import Active
from mrs.replication.replica import Replica, read_position
from mrs.replication.stream import CommitStream, RecordingStore
from mrs.replication.wire import FrameReader, frame
from tests.unit.test_replication_lying_peers import InSyncRecord

TERM = 2
WAIT_S = 30.0
"""Generous: a loaded 2-core CI machine."""


@pytest.fixture
def journals(tmp_path: Path) -> Iterator[dict[str, JournalStore]]:
    stores = {name: JournalStore(tmp_path / name, 1 << 24) for name in ("a", "b", "c")}
    yield stores
    for store in stores.values():
        store.close()


def _instance(name: str, port: int) -> InstanceConfig:
    return InstanceConfig(name, "127.0.0.1", 1, "127.0.0.1", port, Path(name))


def _active(
    store: JournalStore,
    replicas: tuple[InstanceConfig, ...] = (),
    coordinator: object | None = None,
    replica_names: tuple[str, ...] = ("b", "c"),
) -> Active:
    """Instance a, active in TERM, with records 1..3 sealed and durable on itself;
    `coordinator` None: one that only records the in-sync set (InSyncRecord)."""
    stream = CommitStream(term=TERM, replicas=replica_names, deliver=lambda dones: None)
    active = Active(
        group_id=1,
        me=_instance("a", 1),
        replicas=replicas,
        coordinator=coordinator or InSyncRecord(),  # type: ignore[arg-type]
        term=TERM,
        lease_ttl_s=3,
        store=RecordingStore(store, stream),
        stream=stream,
        on_step_down=lambda reason: None,
    )
    for index in range(3):
        active.store.apply([WriteBatch.empty().put_raw(Journal.DQF, b"q%d" % index, b"x")])
    return active


def _commit(number: int, key: bytes, term: int = TERM) -> dict:
    batch = WriteBatch.empty().put_raw(Journal.DQF, key, b"body")
    return {"t": "commit", "term": term, "n": number, "batches": encode_batches([batch])}


def _hello(group: int = 1, term: int = TERM) -> bytes:
    return frame({"t": "hello", "group": group, "term": term, "from": "a"})


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_a_replica_that_answers_under_another_instances_name_counts_for_nothing(
    journals, caplog
) -> None:
    """Before: the active never read the name a replica gives in its answer to the
    hello, so whatever answered at instance b's replication address was counted as b.
    With b's address wrong in the active's bus file (pointing at c, a port forwarded
    to the wrong machine), c's acknowledgements counted as b's too: etcd named b in
    sync though b's disk held none of it (b, behind, could then be the candidate), and
    with five instances two acknowledgements from one disk made a "majority" of two
    disks of five. Now the link is refused with one ERROR naming both instances, and
    nothing it says is counted."""
    caplog.set_level(logging.INFO, "mrs.replication")
    impostor = Replica(1, "c", journals["c"])  # c's real replica, at the address given for b
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, impostor._handle, 0)
        port = listeners[0].socket.getsockname()[1]
        b_misaddressed = _instance("b", port)
        active = _active(journals["a"], (b_misaddressed,))
        nursery.start_soon(active._link_loop, b_misaddressed)
        with trio.fail_after(WAIT_S):
            while not _lines(caplog, "says it is instance 'c', not b"):
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    (line,) = _lines(caplog, "says it is instance 'c', not b")
    assert f"the replica at 127.0.0.1:{port}" in line and "replication address" in line
    assert active.stream.acked.get("b", 0) == 0
    assert active.stream.in_sync == set() and active.coordinator.members == []
    assert active.stream.durable_on_majority() == 0  # nothing answerable
    assert impostor.position == (0, 0)  # and it was sent nothing


async def test_a_replicas_frame_is_bounded_for_the_active_before_it_is_read(journals) -> None:
    """Before: the active read a replica's frames (its answer to the hello, its
    acknowledgements) up to REPLICATION_FRAME_BYTES_MAX, 256 MiB, so whatever answered
    at a replica's address (a lying peer, another program on a reused port) could
    announce a 200 MiB frame and hold that much of the active's memory per link while
    it trickled it in. Now such a frame is refused from its length (a replica's
    frames are tens of bytes) and the link is cut at once."""
    cut = trio.Event()

    async def liar(stream: trio.SocketStream) -> None:
        await FrameReader(stream).next()  # the active's hello
        await stream.send_all(struct.pack(">I", 200 << 20) + b"\0" * (64 << 10))
        try:
            while await stream.receive_some(1 << 16):
                pass
        except trio.BrokenResourceError:
            pass
        cut.set()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, liar, 0)
        b = _instance("b", listeners[0].socket.getsockname()[1])
        active = _active(journals["a"], (b,))
        nursery.start_soon(active._link_loop, b)
        with trio.move_on_after(WAIT_S):
            await cut.wait()
        nursery.cancel_scope.cancel()
    assert cut.is_set(), "the active kept reading a 200 MiB frame from a replica"
    assert active.stream.acked == {}


def _exchange(port: int, *chunks: bytes) -> list[dict]:
    """Send `chunks` on a raw socket to a replica; the frames it answers with until it
    closes the link (or WAIT_S)."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        for chunk in chunks:
            sock.sendall(chunk)
        received = b""
        while data := sock.recv(1 << 16):
            received += data
    answers = []
    while received:
        (length,) = struct.unpack_from(">I", received)
        answers.append(msgpack.unpackb(received[4 : 4 + length], raw=False))
        received = received[4 + length :]
    return answers


BROKEN = {
    "a frame past the bound": (struct.pack(">I", 300 << 20), "frame of 314572800 bytes"),
    "a corrupt frame": (struct.pack(">I", 3) + b"\xc1\xc1\xc1", "not msgpack: FormatError"),
    "a gap in numbering": (frame(_commit(3, b"k3")), "gap: at (2, 1), got 3"),
    "a duplicate number with other content": (frame(_commit(1, b"other")), "gap: at (2, 1)"),
    "a record of a newer term than its link's": (
        frame(_commit(2, b"k2", term=TERM + 5)),
        "a record of term 7 on a link of term 2",
    ),
    "a rebase to a newer term": (
        frame({"t": "rebase", "term": 99, "base": [TERM, 1]}),
        "a record of term 99 on a link of term 2",
    ),
    "a copy of a newer term": (
        frame({"t": "copy", "term": 50, "n": 7, "items": [], "last": True}),
        "a record of term 50 on a link of term 2",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
async def test_a_replica_refuses_what_it_cannot_take_in_one_line_and_keeps_its_journals(
    journals, caplog, case
) -> None:
    """Before: a frame past the bound or not msgpack ended the link in silence (no
    line in the replica's log, nothing told to the active, which logged only "closed
    by the other end" at INFO and dialled again, for ever); a gap or a duplicate
    number was refused to the active but not logged by the replica; and a copy or a
    rebase of a term above its link's hello was applied: the replica's position took
    a term above every term it had seen (99 while it had seen 2), no active's, which
    ranked it above every instance in an election and made it take etcd's record for
    lost (a census). Now each is refused to the active with the reason, logged once
    by the replica however often it is sent again, and nothing of it applied."""
    caplog.set_level(logging.INFO, "mrs.replication")
    store = journals["b"]
    replica = Replica(1, "b", store)
    start = [
        _hello(),
        frame({"t": "copy", "term": TERM, "n": 0, "items": [], "last": True}),
        frame(_commit(1, b"k1")),
    ]
    chunk, why = BROKEN[case]
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, replica._handle, 0)
        port = listeners[0].socket.getsockname()[1]
        for attempt in range(3):  # the active dials again and sends it again
            answers = await trio.to_thread.run_sync(_exchange, port, *start[: 3 - attempt], chunk)
            assert answers[0]["t"] == "hello"
            assert answers[-1]["t"] == "refuse" and why in answers[-1]["why"], answers
            start = [_hello()]  # now at (2, 1): the hello alone, then the same fault
        nursery.cancel_scope.cancel()
    assert len(_lines(caplog, f"replica b refuses a (term {TERM}): {why}")) == 1
    assert read_position(store) == ((TERM, 1), TERM) and replica.position == (TERM, 1)
    assert store.get_raw(Journal.DQF, b"k1") == b"body"
    assert [store.get_raw(Journal.DQF, k) for k in (b"k2", b"k3", b"other")] == [None] * 3
    assert replica.holds_journals  # whole: a candidate as before


async def test_a_hello_of_another_group_is_refused_in_one_line_that_names_it(
    journals, caplog
) -> None:
    """Before: a hello of another group (two buses' instances on swapped ports, a
    copied config block) was logged as a WARNING at every dial, once a second for as
    long as that active ran, and the line did not say which group it came from. Now
    one line names it, and the refusal goes back to the dialer each time."""
    caplog.set_level(logging.INFO, "mrs.replication")
    replica = Replica(1, "b", journals["b"])
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, replica._handle, 0)
        port = listeners[0].socket.getsockname()[1]
        for _ in range(5):
            answers = await trio.to_thread.run_sync(_exchange, port, _hello(group=2, term=9))
            assert [a["t"] for a in answers] == ["refuse"]
        nursery.cancel_scope.cancel()
    (line,) = _lines(caplog, "replica b refuses a: not an active of group 1")
    assert "its hello names group 2" in line
    assert replica.term_seen == 0 and read_position(journals["b"]) == ((0, 0), 0)
