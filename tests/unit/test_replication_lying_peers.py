"""A replica that lies to the active, or answers it with nonsense, loses its link and
nothing else: an acknowledgement of a record the active never sealed would make later
records count as durable on a majority that does not hold them, so it is refused
whole and not counted; a malformed answer to the hello is refused the same way, and
the active goes on serving (the link is dialled again). Real stores, a real Active."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from journals import JournalStore, WriteBatch
from journals.keys import Journal
from mrs.config.instance_types import InstanceConfig
from mrs.replication.active import Active, _hello_answer
from mrs.replication.replica import Replica
from mrs.replication.stream import CommitStream, RecordingStore
from mrs.replication.wire import FrameReader, LinkBroken, frame


class InSyncRecord:
    """The coordinator's one call here: the in-sync set a caught-up replica joins."""

    def __init__(self) -> None:
        self.members: list[tuple[str, ...]] = []

    async def set_in_sync(
        self, term: int, members: tuple[str, ...], acks_needed: int, request: object = None
    ) -> bool:
        self.members.append(members)
        return True


@pytest.fixture
def active(tmp_path: Path):
    journals = JournalStore(tmp_path / "a", 1 << 24)
    me = InstanceConfig("a", "127.0.0.1", 1, "127.0.0.1", 2, Path("a"))
    stream = CommitStream(
        term=2, replicas=("b", "c"), deliver=lambda dones: None, clock_s=lambda: 0.0
    )
    active = Active(
        group_id=1,
        me=me,
        replicas=(),
        coordinator=InSyncRecord(),  # type: ignore[arg-type]
        term=2,
        lease_ttl_s=3,
        store=RecordingStore(journals, stream),
        stream=stream,
        on_step_down=lambda reason: None,
    )
    for index in range(3):  # records 1..3 sealed
        active.store.apply([WriteBatch.empty().put_raw(Journal.DQF, b"q%d" % index, b"x")])
    yield active
    journals.close()


async def _acks_from(active: Active, *messages: dict) -> None:
    """Feeds `messages` to the active's acknowledgement task for replica b."""
    ours, theirs = trio.testing.memory_stream_pair()
    for message in messages:
        await theirs.send_all(frame(message))
    await theirs.aclose()
    with trio.CancelScope() as scope:
        await active._acks("b", FrameReader(ours), scope)


@pytest.mark.parametrize(
    "lie",
    [
        {"t": "ack", "n": 4},
        {"t": "ack", "n": 10**9},
        {"t": "ack", "n": -1},
        {"t": "ack"},
        {"t": "ack", "n": "3"},
        {"t": "ack", "n": 2.0},
    ],  # fmt: skip
)
async def test_an_acknowledgement_of_a_record_never_sealed_cuts_the_link(active, lie) -> None:
    assert active.stream.number == 3
    with pytest.raises(LinkBroken, match="b acknowledged record"):
        await _acks_from(active, {"t": "ack", "n": 2}, lie)
    assert active.stream.acked["b"] == 2  # the honest one counted, the lie not
    assert active.stream.durable_on({"b", "c"}) == 2  # a majority (a and b) holds 1..2 only
    assert "b" not in active.stream.in_sync


async def test_an_honest_acknowledgement_of_the_last_record_counts(active) -> None:
    with pytest.raises(LinkBroken, match="closed by the other end"):
        await _acks_from(active, {"t": "ack", "n": 3})
    assert active.stream.acked["b"] == 3
    assert "b" in active.stream.in_sync  # caught up: it joins
    assert active.coordinator.members == [("a", "b")]


@pytest.mark.parametrize(
    "answer",
    [
        {"t": "ok", "pos": [1]},
        {"t": "ok", "pos": "x"},
        {"t": "ok", "pos": [1, -2]},
        {"t": "ok", "pos": [1, 2], "led": "1"},
        {"t": "ok", "pos": [None, 2]},
    ],  # fmt: skip
)
def test_a_malformed_answer_to_the_hello_cuts_the_link(answer) -> None:
    with pytest.raises(LinkBroken, match="b answered the hello"):
        _hello_answer("b", answer)


def test_a_whole_answer_to_the_hello_is_read() -> None:
    assert _hello_answer("b", {"t": "ok", "pos": [2, 7], "led": 1}) == ((2, 7), 1)
    assert _hello_answer("b", {"t": "ok"}) == ((0, 0), 0)  # a replica with nothing yet


# ------------------------------------------------- and an active that lies to a replica
@pytest.fixture
def replica(tmp_path: Path):
    store = JournalStore(tmp_path / "b", 1 << 24)
    yield Replica(1, "b", store)
    store.close()


@pytest.mark.parametrize("term", ["x", -1, 2.5, None])
def test_a_hello_whose_term_is_not_a_whole_number_is_refused(replica, term) -> None:
    hello = {"t": "hello", "group": 1, "term": term, "from": "z"}
    assert "not a whole number" in replica.check_hello(hello)
    assert replica.term_seen == 0  # nothing recorded


@pytest.mark.parametrize(
    "message",
    [{"t": "copy", "term": "x"}, {"t": "rebase", "term": 2, "n": "y"}, {"t": "bridge", "term": 2}],
)
def test_a_malformed_message_is_refused_not_raised(replica, message) -> None:
    replica.check_hello({"t": "hello", "group": 1, "term": 2, "from": "a"})
    answer = replica.receive(message)
    assert answer is not None and answer["t"] == "refuse" and "malformed" in answer["why"]


@pytest.mark.parametrize("key", [10**12, "text", [1, 2]])
def test_a_commit_with_a_key_that_is_not_bytes_is_refused_and_nothing_applied(replica, key) -> None:
    replica.check_hello({"t": "hello", "group": 1, "term": 2, "from": "a"})
    assert replica.receive({"t": "rebase", "term": 2, "base": [0, 0]}) == {"t": "ack", "n": 0}
    good = {"t": "commit", "term": 2, "n": 1, "batches": [[[["dqf", b"k1", b"v"]], []]]}
    bad = {"t": "commit", "term": 2, "n": 2, "batches": [[[["dqf", key, b"v"]], []]]}
    answers = replica.receive_commits([good, bad])
    assert answers[0] == {"t": "ack", "n": 1}  # what came before it is applied
    assert answers[1]["t"] == "refuse" and "where bytes belong" in answers[1]["why"]
    assert replica.position == (2, 1)


def test_a_copy_slice_with_a_key_that_is_not_bytes_is_refused_before_any_wipe(replica) -> None:
    replica.check_hello({"t": "hello", "group": 1, "term": 2, "from": "a"})
    assert replica.receive({"t": "rebase", "term": 2, "base": [0, 0]}) == {"t": "ack", "n": 0}
    slice_ = {"t": "copy", "term": 2, "n": 1, "last": True, "items": [["dqf", 10**12, b"v"]]}
    answer = replica.receive(slice_)
    assert answer is not None and "where bytes belong" in answer["why"]
    assert replica.position == (2, 0) and replica.holds_journals  # not wiped
