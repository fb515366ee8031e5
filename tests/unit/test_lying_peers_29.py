"""A peer that lies to a replicated group's active, or goes silent at the hello, against
the real `Active` on real LMDB journals over in-memory streams (the coordinator's one
call here is recorded in memory).

What a user depends on: an answer goes out only once a majority of the group's disks
holds its commit, so nothing a replica says may count for records none of its links
was sent; and a peer that takes the connection and never answers costs that replica's
link a bounded wait, after which the true replica is dialled again.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from journals import JournalStore, WriteBatch
from journals.keys import Journal
from mrs.config.instance_types import InstanceConfig
from mrs.limits import REPLICATION_HELLO_ANSWER_S_MAX
from mrs.replication.active import Active
from mrs.replication.stream import CommitStream, RecordingStore
from mrs.replication.wire import FrameReader, frame

TERM = 2
WAIT_S = 30.0
"""Generous: a loaded 2-core CI machine."""
B = InstanceConfig("b", "127.0.0.1", 1, "127.0.0.1", 3, Path("b"))


class InSyncRecord:
    """The coordinator's one call here: the in-sync set a caught-up replica joins."""

    def __init__(self) -> None:
        self.members: list[tuple[str, ...]] = []
        self.joined = trio.Event()

    async def set_in_sync(
        self, term: int, members: tuple[str, ...], acks_needed: int, request: object = None
    ) -> bool:
        self.members.append(members)
        self.joined.set()
        return True


class Answered:
    """The answers the stream let out (one held for records 1..3)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, dones: list) -> None:
        self.count += len(dones)


@pytest.fixture
def active(tmp_path: Path):
    """Instance a, active in TERM with replicas b and c, records 1..3 sealed and one
    answer held for them (a majority: a and one replica)."""
    journals = JournalStore(tmp_path / "a", 1 << 24)
    answered = Answered()
    stream = CommitStream(term=TERM, replicas=("b", "c"), deliver=answered, clock_s=lambda: 0.0)
    active = Active(
        group_id=1,
        me=InstanceConfig("a", "127.0.0.1", 1, "127.0.0.1", 2, Path("a")),
        replicas=(B,),
        coordinator=InSyncRecord(),  # type: ignore[arg-type]
        term=TERM,
        lease_ttl_s=3,
        store=RecordingStore(journals, stream),
        stream=stream,
        on_step_down=lambda reason: None,
    )
    for index in range(3):
        active.store.apply([WriteBatch.empty().put_raw(Journal.DQF, b"q%d" % index, b"x")])
    stream.hold([lambda error: None])
    active.answered = answered  # type: ignore[attr-defined]
    yield active
    journals.close()


def _hello_back(position: list[int], whole: bool) -> bytes:
    return frame({"t": "hello", "name": "b", "pos": position, "led": 0, "whole": whole,
                  "pings": True})  # fmt: skip


async def _copy_then_ack(reader: FrameReader, stream: trio.abc.Stream) -> None:
    """An honest replica's side of a full copy: every slice read, then acknowledged."""
    while not (message := await reader.next())["last"]:
        assert message["t"] == "copy"
    await stream.send_all(frame({"t": "ack", "n": message["n"]}))


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


@pytest.mark.parametrize("whole", [True, False])
async def test_a_hello_claiming_records_never_sent_counts_for_nothing(
    active, caplog, whole
) -> None:
    """Before: a replica whose answer to the hello said it held records 1..3 of the
    active's term, though none of its links had been sent any, was taken at its word:
    saying its journals were whole, it joined the in-sync set at once; saying
    nothing of that, its link started past record 3 and its acknowledgement of 3
    counted. Either way the answer held for 1..3 went out resting on the active's disk
    alone. Now nothing it claims counts, it is sent a full copy, and one ERROR names it."""
    caplog.set_level(logging.INFO, "mrs.replication")
    ours, theirs = trio.testing.memory_stream_pair()
    reader = FrameReader(theirs)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(active._serve, "b", ours)
        with trio.fail_after(WAIT_S):
            assert (await reader.next())["t"] == "hello"
            await theirs.send_all(_hello_back([TERM, 3], whole))
            first = await reader.next()
        assert first["t"] == "copy" and first["n"] == 3, first
        assert active.stream.acked.get("b", 0) == 0 and "b" not in active.stream.in_sync
        assert active.answered.count == 0 and active.stream.answered == 0
        nursery.cancel_scope.cancel()
    claimed = "replica b says it holds records up to 3 of term 2, but was sent records up to 0"
    assert len(_lines(caplog, claimed)) == 1


async def test_a_replica_back_at_the_last_record_it_was_sent_joins_at_its_hello(active) -> None:
    """The true case the check above must keep: a replica that was sent records 1..3
    on an earlier link, and lost it, says at its next hello that it holds them whole;
    it joins the in-sync set at once, with no copy (a group that writes nothing sends
    no record it could acknowledge)."""
    ours, theirs = trio.testing.memory_stream_pair()
    reader = FrameReader(theirs)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(active._serve, "b", ours)
            await reader.next()
            await theirs.send_all(_hello_back([0, 0], False))
            await _copy_then_ack(reader, theirs)
            await active.coordinator.joined.wait()
            nursery.cancel_scope.cancel()
    assert active.answered.count == 1  # a and b hold 1..3
    active.stream.in_sync.discard("b")  # dropped while its link was down
    ours, theirs = trio.testing.memory_stream_pair()
    reader = FrameReader(theirs)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(active._serve, "b", ours)
            await reader.next()
            await theirs.send_all(_hello_back([TERM, 3], True))
            while "b" not in active.stream.in_sync:
                await active.stream.released.wait()
            nursery.cancel_scope.cancel()
    assert active.stream.acked["b"] == 3 and active.coordinator.members[-1] == ("a", "b")


class Dials:
    """A network whose first dial of b reaches a peer that reads the hello and never
    answers (no TCP close comes), and whose next dials reach the true b."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.count = 0

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        self.count += 1
        ours, theirs = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self._silent if self.count == 1 else self._true_b, theirs)
        return ours

    async def _silent(self, stream: trio.abc.Stream) -> None:
        await FrameReader(stream).next()
        await trio.sleep_forever()

    async def _true_b(self, stream: trio.abc.Stream) -> None:
        reader = FrameReader(stream)
        await reader.next()
        await stream.send_all(_hello_back([0, 0], False))
        await _copy_then_ack(reader, stream)
        await trio.sleep_forever()


async def test_a_peer_silent_after_the_hello_is_dropped_and_the_replica_dialled_again(
    active, caplog, autojump_clock
) -> None:
    """Before: the active waited for the answer to its hello without a bound (the idle
    link's silence check starts after it), so a replica's machine lost just then, or a
    process that took the connection and said nothing, held that replica's link loop
    for the rest of the term: b, back, was never dialled again and never rejoined.
    Now the link ends after REPLICATION_HELLO_ANSWER_S_MAX with one line, and the next
    dial reaches b, which catches up and joins."""
    caplog.set_level(logging.INFO, "mrs.replication")
    async with trio.open_nursery() as nursery:
        active.network = Dials(nursery)
        nursery.start_soon(active._link_loop, B)
        with trio.fail_after(4 * REPLICATION_HELLO_ANSWER_S_MAX):
            await active.coordinator.joined.wait()
        nursery.cancel_scope.cancel()
    assert active.network.count == 2 and "b" in active.stream.in_sync
    assert active.answered.count == 1
    silent = f"lost: b did not answer the hello in {REPLICATION_HELLO_ANSWER_S_MAX:g} s"
    assert len(_lines(caplog, silent)) == 1
