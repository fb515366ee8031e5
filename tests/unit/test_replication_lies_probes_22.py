"""A peer that lies on a replicated group's replication link, against the real `Replica`
and `Active` on real LMDB journals over real TCP sockets (the coordinator in memory).

What a user depends on: whatever a peer sends, the instance on the other side refuses
it in one line and drops that link; it neither crashes nor writes what is not the
group's journals; it counts nothing toward a majority that a disk may not hold; and it
goes on with a true peer once one comes back.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import msgpack
import pytest
import trio
import trio.testing

from journals import JournalStore, WriteBatch
from journals.batch import encode_batches
from journals.keys import Journal
from mrs.replication.coordinator import MemoryCoordinator, MemoryElection
from mrs.replication.link_out import LinkOut
from mrs.replication.replica import Replica, read_position
from mrs.replication.wire import FrameReader, LinkBroken, frame
from tests.process.test_replication_lying_peers_20 import (
    _active,
    _commit,
    _exchange,
    _hello,
    _instance,
    _lines,
)

TERM = 2
WAIT_S = 30.0
"""Generous: a loaded 2-core CI machine."""
_START = [
    _hello(),
    frame({"t": "copy", "term": TERM, "n": 0, "items": [], "last": True}),
    frame(_commit(1, b"k1")),
]
"""An active's first frames: an empty copy at (TERM, 0), then record 1 (DQF key k1)."""


@pytest.fixture
def store(tmp_path: Path):
    journals = JournalStore(tmp_path / "b", 1 << 24)
    yield journals
    journals.close()


def _first_answers(port: int, count: int, *chunks: bytes) -> list[dict]:
    """Send `chunks` on a raw socket to a replica; its first `count` answers (a link it
    keeps open is not waited out, unlike `_exchange`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        for chunk in chunks:
            sock.sendall(chunk)
        received, answers = b"", []
        while len(answers) < count and (data := sock.recv(1 << 16)):
            received += data
            while len(received) >= 4 and len(received) >= 4 + (
                size := int.from_bytes(received[:4], "big")
            ):
                answers.append(msgpack.unpackb(received[4 : 4 + size], raw=False))
                received = received[4 + size :]
    return answers


async def _told(replica: Replica, *chunks: bytes) -> tuple[list[dict], list[dict]]:
    """Serve `replica` on its real path (`Replica.serve`, which ends the instance if a
    link's task raises), send it `_START` and `chunks` on one link, then say hello on a
    second one: (answers on the first, answers on the second)."""
    async with trio.open_nursery() as nursery:
        _, port = await nursery.start(replica.serve, "127.0.0.1", 0)
        first = await trio.to_thread.run_sync(_exchange, port, *_START, *chunks)
        again = await trio.to_thread.run_sync(_first_answers, port, 1, _hello())
        nursery.cancel_scope.cancel()
    return first, again


NUMBERS = {
    "a commit numbered infinity": (
        {"t": "commit", "term": TERM, "n": float("inf"), "batches": []},
        "n inf is not a whole number",
    ),
    "a commit of term infinity": (
        {"t": "commit", "term": float("inf"), "n": 2, "batches": []},
        "term inf is not a whole number",
    ),
    "a last copy slice numbered -1": (
        {"t": "copy", "term": TERM, "n": -1, "items": [], "last": True},
        "n -1 is not a whole number",
    ),
    "a last copy slice whole at infinity": (
        {"t": "copy", "term": TERM, "n": 5, "items": [], "last": True, "upto": float("inf")},
        "upto inf is not a whole number",
    ),
    "a rebase on base infinity": (
        {"t": "rebase", "term": TERM, "base": [float("inf"), 0]},
        "base inf is not a whole number",
    ),
    "a bridge record on base infinity": (
        {"t": "bridge", "term": TERM, "n": 2, "base": [float("inf"), 5], "batches": []},
        "base inf is not a whole number",
    ),
}


@pytest.mark.parametrize("case", sorted(NUMBERS))
async def test_a_number_no_position_holds_is_refused_and_the_replica_serves_on(
    store, caplog, case
) -> None:
    """Before: `int()` of a float infinity raised OverflowError and a negative number
    failed to pack (struct.error); neither was refused, so the link's task raised out
    of `Replica.serve` and ended the instance's process with a traceback, after a copy
    slice numbered -1 had wiped its journals. Now the frame is refused to the active
    in one line, nothing is applied or wiped, and the next link is served."""
    caplog.set_level(logging.INFO, "mrs.replication")
    replica = Replica(1, "b", store)
    message, why = NUMBERS[case]
    first, again = await _told(replica, frame(message))
    assert first[-1]["t"] == "refuse" and f"malformed: {why}" in first[-1]["why"], first
    assert again[0] == {"t": "hello", "name": "b", "pos": [TERM, 1], "led": 0, "whole": True,
                        "pings": True}  # fmt: skip
    assert len(_lines(caplog, f"replica b refuses a (term {TERM}): malformed: {why}")) == 1
    assert read_position(store) == ((TERM, 1), TERM) and store.get_raw(Journal.DQF, b"k1")
    assert replica.holds_journals and not replica.copy_partial


_U64 = (8).to_bytes(8, "big")
RECORD_LIES = {
    "sets replication.led": (
        [("meta", b"replication.led", TERM.to_bytes(8, "big"))],
        [],
        "it writes this replica's own mark 'replication.led'",
    ),
    "sets replication.copy_upto": (
        [("meta", b"replication.copy_upto", TERM.to_bytes(8, "big") + (10**9).to_bytes(8, "big"))],
        [],
        "it writes this replica's own mark 'replication.copy_upto'",
    ),
    "sets replication.copy_partial": (
        [("meta", b"replication.copy_partial", b"1")],
        [],
        "it writes this replica's own mark 'replication.copy_partial'",
    ),
    "sets replication.boots": (
        [("meta", b"replication.boots", _U64)],
        [],
        "it writes this replica's own mark 'replication.boots'",
    ),
    "deletes replication.term": (
        [],
        [("meta", b"replication.term")],
        "it writes this replica's own mark 'replication.term'",
    ),
    "puts an empty key": (
        [("dqf", b"", b"v")],
        [],
        "a key of 0 bytes in journal dqf (LMDB holds 1 to 511)",
    ),
    "puts a key LMDB cannot hold": (
        [("pcj", b"k" * 512, b"v")],
        [],
        "a key of 512 bytes in journal pcj (LMDB holds 1 to 511)",
    ),
}


@pytest.mark.parametrize("case", sorted(RECORD_LIES))
async def test_a_record_that_writes_outside_the_groups_journals_is_refused_whole(
    tmp_path, caplog, case
) -> None:
    """Before: a commit that wrote this replica's own marks was applied and
    acknowledged; after its next restart, the replica that had acknowledged every
    record was no candidate (`copy_upto`, `copy_partial`, `boots`) or never bridged
    (`led`), so a failover waited on it; and a key LMDB cannot hold was reported as
    the replica's disk failing (ERROR "cannot store the active's records", "cannot
    store" in `mrs status`). Now the record is refused with its reason, nothing of it
    is applied (not its DQF write either), the journals stay a candidate across a
    restart, and the next true record is taken."""
    caplog.set_level(logging.INFO, "mrs.replication")
    puts, deletes, why = RECORD_LIES[case]
    batch = WriteBatch(
        [(Journal.DQF, b"k2", b"body"), *((Journal(j), k, v) for j, k, v in puts)],
        [(Journal(j), k) for j, k in deletes],
    )
    lie = {"t": "commit", "term": TERM, "n": 2, "batches": encode_batches([batch])}
    store = JournalStore(tmp_path / "b", 1 << 24)
    try:
        first, _ = await _told(Replica(1, "b", store), frame(lie))
    finally:
        store.close()
    assert first[-1] == {"t": "refuse", "why": f"record 2: {why}"}, first
    assert len(_lines(caplog, f"replica b refuses a (term {TERM}): record 2: {why}")) == 1
    assert not _lines(caplog, "cannot store")
    store = JournalStore(tmp_path / "b", 1 << 24)  # the instance restarted
    try:
        replica = Replica(1, "b", store)
        assert replica.holds_journals and replica.candidate_position == (TERM, 1)
        assert replica.comparable_position == (TERM, 1) and replica.led == 0
        assert store.get_raw(Journal.DQF, b"k2") is None
        async with trio.open_nursery() as nursery:  # the true record 2
            _, port = await nursery.start(replica.serve, "127.0.0.1", 0)
            answers = await trio.to_thread.run_sync(
                _first_answers, port, 2, _hello(), frame(_commit(2, b"k2"))
            )
            nursery.cancel_scope.cancel()
        assert answers[-1] == {"t": "ack", "n": 2} and store.get_raw(Journal.DQF, b"k2")
    finally:
        store.close()


# ------------------------------------------------------------- and the active's side
@pytest.mark.parametrize("term_over", [False, True])
async def test_a_refusal_that_claims_a_newer_term_steps_down_only_if_etcd_agrees(
    tmp_path, caplog, term_over
) -> None:
    """Before: whatever answered at a replica's address could make the active step
    down with one frame, `{"t": "refuse", "why": "older term ..."}`, while its lease
    stood (and the next active at its first dial): the group without an active for a
    lease each time, though the docs promise that a lying peer only loses its link.
    Now the active asks etcd: while etcd names it the leader of its term, the link is
    refused in one line and dialled again, and the true replica found there joins; once
    etcd names another, it steps down as before."""
    caplog.set_level(logging.INFO, "mrs.replication")
    election = MemoryElection()
    coordinator = MemoryCoordinator(election, "a")
    assert await coordinator.campaign(TERM - 1) == TERM
    a_store, b_store = (JournalStore(tmp_path / name, 1 << 24) for name in "ab")
    true_b, dials = Replica(1, "b", b_store), []

    async def at_bs_address(stream: trio.SocketStream) -> None:
        dials.append(stream)
        if len(dials) > 1:
            return await true_b._handle(stream)
        await FrameReader(stream).next()  # the active's hello
        if term_over:  # a's lease ran out and c won the next term
            election.expire("a")
            await MemoryCoordinator(election, "c").campaign()
        await stream.send_all(frame({"t": "refuse", "why": f"older term {TERM} (seen 9)"}))

    try:
        active = _active(a_store, coordinator=coordinator, replica_names=("b",))
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(trio.serve_tcp, at_bs_address, 0)
            b = _instance("b", listeners[0].socket.getsockname()[1])
            nursery.start_soon(active._link_loop, b)
            with trio.fail_after(WAIT_S):
                while "b" not in active.stream.in_sync and active.stepped_down is None:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    finally:
        a_store.close()
        b_store.close()
    if term_over:
        assert active.stepped_down == "b has seen a newer term" and len(dials) == 1
        return
    assert active.stepped_down is None and len(dials) == 2
    assert len(_lines(caplog, f"replica b refuses term {TERM}: older term {TERM} (seen 9)")) == 1
    assert active.stream.acked["b"] == 3 and true_b.position == (TERM, 3)


async def test_an_acknowledgement_of_a_record_not_yet_sent_is_not_counted(tmp_path) -> None:
    """Before: the active refused only an acknowledgement of a record it never sealed,
    so a replica whose link had been handed records up to 1 (the rest held for
    company, or behind a full socket) could acknowledge record 3 and count for it: an
    answer resting on a disk that never saw the record. Now its link is cut, and only
    what it was sent counts."""
    store = JournalStore(tmp_path / "a", 1 << 24)
    try:
        active = _active(store, coordinator=MemoryCoordinator(MemoryElection(), "a"))
        ours, theirs = trio.testing.memory_stream_pair()
        active.links["b"] = LinkOut(ours, 1)  # records up to 1 handed to b's link
        for number in (1, 3):
            await theirs.send_all(frame({"t": "ack", "n": number}))
        await theirs.aclose()
        lie = "b acknowledged record 3 of term 2; it was sent records up to 1"
        with pytest.raises(LinkBroken, match=lie), trio.CancelScope() as scope:
            await active._acks("b", FrameReader(ours), scope)
    finally:
        store.close()
    assert active.stream.acked["b"] == 1 and active.stream.durable_on({"b", "c"}) == 1


@pytest.mark.parametrize("case", sorted(RECORD_LIES))
def test_a_burst_applies_the_records_before_such_a_record_and_nothing_of_it(store, case) -> None:
    """A replica applies a burst of records in one transaction: the true ones before
    the record that writes outside the group's journals are applied and acknowledged,
    and none of that record's writes (its DQF write neither) go in with them."""
    puts, deletes, why = RECORD_LIES[case]
    batch = WriteBatch(
        [(Journal.DQF, b"k3", b"body"), *((Journal(j), k, v) for j, k, v in puts)],
        [(Journal(j), k) for j, k in deletes],
    )
    lie = {"t": "commit", "term": TERM, "n": 3, "batches": encode_batches([batch])}
    replica = Replica(1, "b", store)
    assert replica.check_hello({"t": "hello", "group": 1, "term": TERM, "from": "a"}) is None
    assert replica.receive({"t": "rebase", "term": TERM, "base": [0, 0]}) == {"t": "ack", "n": 0}
    answers = replica.receive_commits([_commit(1, b"k1"), _commit(2, b"k2"), lie])
    assert answers == [{"t": "ack", "n": 2}, {"t": "refuse", "why": f"record 3: {why}"}]
    assert store.get_raw(Journal.DQF, b"k2") and store.get_raw(Journal.DQF, b"k3") is None
    assert read_position(store) == ((TERM, 2), TERM) and replica.holds_journals
