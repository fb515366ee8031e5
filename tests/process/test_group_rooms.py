"""The group's rooms driven directly, in process: real LMDB journals (fsync), the
production InlineWriter, and two link sessions joined by an in-memory channel with a
hand-turned clock — no sockets, no server process, no sleeps.

What a user depends on here: nothing is answered as stored before its commit; a get
is handed over only once its delivery mark is durable; a confirm deletes the DQF
record and writes the PCJ; a restart recovers what was not confirmed, POSSDUPL if it
had been delivered; a SAF message crosses a link, is deleted from the sender's SAF
only once the peer stored it, and a message in flight when the link drops is kept.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest

from journals import InlineWriter, Journal, JournalError, JournalStore, WriteBatch
from journals.writer import NOT_ATTEMPTED
from mrs import protocol as wire
from mrs.config.bus import parse_config
from mrs.errors import Refused
from mrs.group import Group
from mrs.group.link_session import PeerLink
from mrs.model import DeliveryMode, Status, Uma
from mrs.replication.stream import CommitStream, RecordingStore, ReplicatedWriter

BUS = """
[[group]]
id = 1
name = "G1"
listen = "127.0.0.1:0"
data_dir = "g1"
pcj_default = true
[group.limits]
dqf_messages_max = 5
[[group.queue]]
id = 10
name = "IN"
[[group.queue]]
id = 11
name = "OUT"
confirm = "explicit-out-of-order"
[[group]]
id = 2
name = "G2"
listen = "127.0.0.1:0"
data_dir = "g2"
[[group.queue]]
id = 10
name = "IN"
[[group.queue]]
id = 11
name = "OUT"
[[link]]
groups = [1, 2]
"""
JOURNAL_BYTES = 64 << 20


class ManualTimers:
    """Timers that fire only when the test says so."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, Callable[[], None]]] = []

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Callable[[], None]:
        self.calls.append((delay_s, callback))
        return lambda: None


@dataclass(eq=False)
class FakeSession:
    id: int
    attached: object = None
    peer: str = "test"
    events: list = field(default_factory=list)

    def send(self, event: object) -> None:
        self.events.append(event)

    answer = send  # one frame per answer, as for a client that reads no AnswerBatch


@dataclass(eq=False)
class Node:
    """One group in process: its journals, writer and rooms."""

    group: Group
    store: JournalStore
    writer: InlineWriter
    sessions: itertools.count = field(default_factory=lambda: itertools.count(1))
    stream: CommitStream | None = None
    """A replicated group's active: its answers wait until `replica_acks`."""

    def commit(self) -> None:
        self.writer.commit_pending()
        self.replica_acks()

    def replica_acks(self) -> None:
        """The replica has every commit: the answers held for it go out."""
        if self.stream is not None:
            self.stream.ack("b", self.stream.number)

    def session(self, queue: str) -> FakeSession:
        session = FakeSession(next(self.sessions))
        self.group.attach(session, wire.Attach(request_id=1, queue=queue))
        session.events.clear()
        return session

    def close(self) -> None:
        self.commit()
        self.store.close()


def open_node(
    directory: Path,
    group_id: int,
    dqf_messages_max: int = 5,
    *,
    replicated: bool = False,
    bus_text: str | None = None,
) -> Node:
    """One group; `replicated`: as the active of a replicated group whose one replica
    ("b") acknowledges only when the test says (mrs.replication.stream's writer)."""
    text = (bus_text or BUS).replace(
        "dqf_messages_max = 5", f"dqf_messages_max = {dqf_messages_max}"
    )
    bus = parse_config(text, directory / "bus.toml")
    config = bus.group(group_id)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    store = JournalStore(config.data_dir / "journals", JOURNAL_BYTES)
    stream = None
    if replicated:
        stream = CommitStream(
            1, ("b",), lambda dones: [done(None) for done in dones], clock_s=lambda: 0.0
        )
        stream.in_sync.add("b")
        writer: InlineWriter = ReplicatedWriter(RecordingStore(store, stream), lambda: None, stream)
    else:
        writer = InlineWriter(store, lambda: None)
    group = Group(bus, config, store, writer, ManualTimers(), clock_ns=lambda: 1_000)
    group.recover()
    return Node(group, store, writer, stream=stream)


@pytest.fixture
def node(tmp_path: Path):
    opened = open_node(tmp_path, 1)
    yield opened
    opened.close()


def put(
    target: str, body: bytes, mode: DeliveryMode, uma: Uma = Uma.DISC, request_id: int = 7
) -> wire.Put:
    return wire.Put(
        request_id=request_id,
        target=target,
        body=body,
        delivery=int(mode),
        uma=int(uma),
        msg_class=0,
        msg_type=0,
        priority=0,
        timeout_ms=0,
        correlation_id=b"",
        resp_q="",
    )


def only(events: list, kind: type):
    found = [event for event in events if isinstance(event, kind)]
    assert len(found) == 1, events
    return found[0]


# ---------------------------------------------------------------------- InlineWriter
def test_inline_writer_answers_only_after_its_commit_in_order(tmp_path: Path) -> None:
    store = JournalStore(tmp_path / "j", JOURNAL_BYTES)
    wakes: list[int] = []
    writer = InlineWriter(store, lambda: wakes.append(1))
    done: list[tuple[int, JournalError | None]] = []
    for index in range(3):
        batch = WriteBatch.empty().put_raw(Journal.META, f"k{index}".encode(), b"v")
        writer.submit(batch, lambda error, index=index: done.append((index, error)))
    assert done == [] and writer.pending and len(wakes) == 1  # one wake per idle->busy
    writer.commit_pending()
    assert done == [(0, None), (1, None), (2, None)]
    assert store.get_raw(Journal.META, b"k2") == b"v"
    assert writer.stats.commits == 1  # three batches, one synced transaction
    store.close()


def test_inline_writer_skips_a_guarded_batch_not_attempted(tmp_path: Path) -> None:
    store = JournalStore(tmp_path / "j", JOURNAL_BYTES)
    writer = InlineWriter(store, lambda: None)
    outcomes: list[JournalError | None] = []
    batch = WriteBatch.empty().put_raw(Journal.META, b"guarded", b"v")
    batch.guard = lambda: False
    writer.submit(batch, outcomes.append)
    writer.commit_pending()
    assert outcomes == [NOT_ATTEMPTED]
    assert store.get_raw(Journal.META, b"guarded") is None
    store.close()


# ---------------------------------------------------------------------- Group: put
def test_recoverable_put_is_answered_only_once_durable(node: Node) -> None:
    sender = node.session("OUT")
    node.group.put(sender, put("IN", b"hello", DeliveryMode.WF_DQF))
    assert sender.events == []  # queued for the commit, not yet on disk
    assert node.store.count(Journal.DQF) == 0
    node.commit()
    done = only(sender.events, wire.PutDone)
    assert (done.status, done.delivery_status) == (Status.SUCCESS, Status.STORED)
    assert node.store.count(Journal.DQF) == 1
    assert node.group.status_info()["dqf_messages"] == 1


def test_full_dqf_takes_the_uma(node: Node) -> None:
    sender = node.session("OUT")
    for index in range(1, 7):  # dqf_messages_max = 5
        node.group.put(sender, put("IN", b"x", DeliveryMode.WF_DQF, Uma.DISC, request_id=index))
        node.commit()
    last = [event for event in sender.events if event.request_id == 6]
    assert (last[0].delivery_status, last[0].uma_status) == (Status.DQF_FULL, Status.DISC_SUCCESS)
    assert node.store.count(Journal.DQF) == 5


def test_memory_put_to_a_local_queue_needs_no_commit(node: Node) -> None:
    sender = node.session("OUT")
    node.group.put(sender, put("OUT", b"m", DeliveryMode.WF_MEM))
    done = only(sender.events, wire.PutDone)
    assert done.delivery_status in (Status.ENQUEUED, Status.UNATTACHEDQ)
    assert node.store.count(Journal.DQF) == 0


# ---------------------------------------------------------------------- Group: get, confirm
def test_get_confirm_pcj(node: Node) -> None:
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.put(sender, put("IN", b"body", DeliveryMode.WF_DQF))
    node.commit()
    node.group.get(receiver, wire.Get(request_id=3, timeout_ms=0))
    assert receiver.events == []  # the delivery mark must be durable first
    node.commit()
    delivery = only(receiver.events, wire.Delivery)
    assert (delivery.body, delivery.delivery_status) == (b"body", Status.CONFIRMREQ)
    node.group.confirm(
        receiver, wire.Confirm(request_id=4, seq=delivery.seq, confirm_value=9, force_j=0)
    )
    assert not any(isinstance(event, wire.Confirmed) for event in receiver.events)
    node.commit()
    assert only(receiver.events, wire.Confirmed).seq == delivery.seq
    assert node.store.count(Journal.DQF) == 0
    assert node.store.count(Journal.PCJ) == 1  # pcj_default = true
    assert node.group.status_info()["dqf_messages"] == 0


def test_parked_get_is_served_when_a_message_lands(node: Node) -> None:
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.get(receiver, wire.Get(request_id=3, timeout_ms=-1))
    node.group.put(sender, put("IN", b"late", DeliveryMode.WF_DQF))
    node.commit()  # the DQF record lands and is offered to the parked get
    node.commit()  # the delivery mark
    assert only(receiver.events, wire.Delivery).body == b"late"


def test_restart_recovers_unconfirmed_as_possible_duplicate(tmp_path: Path) -> None:
    first = open_node(tmp_path, 1)
    sender, receiver = first.session("OUT"), first.session("IN")
    first.group.put(sender, put("IN", b"keep", DeliveryMode.WF_DQF))
    first.commit()
    first.group.get(receiver, wire.Get(request_id=3, timeout_ms=0))
    first.commit()
    seq = only(receiver.events, wire.Delivery).seq
    first.close()  # the receiver never confirmed

    second = open_node(tmp_path, 1)
    receiver = second.session("IN")
    second.group.get(receiver, wire.Get(request_id=3, timeout_ms=0))
    second.commit()
    again = only(receiver.events, wire.Delivery)
    assert (again.seq, again.body, again.delivery_status) == (seq, b"keep", Status.POSSDUPL)
    assert second.group.status_info()["epoch"] == 2
    second.close()


# ---------------------------------------------------------------------- outbound
def test_link_down_saf_put_is_stored_in_the_saf(node: Node) -> None:
    sender = node.session("OUT")
    node.group.put(sender, put("2.10", b"later", DeliveryMode.WF_SAF))
    node.commit()
    done = only(sender.events, wire.PutDone)
    assert done.delivery_status == Status.STORED
    assert node.store.count(Journal.SAF) == 1
    assert node.group.status_info()["links"]["2"] == {
        "state": "down",
        "saf_backlog": 1,
        "notices_pending": 0,
        "mrs_acks_owed": 0,
        "receipts_pending": 0,
        "messages_sent": 0,  # kept while the link is down (mrs_link_messages_sent_total)
        "messages_resent": 0,
    }


def test_link_down_dqf_put_takes_its_dlq_uma(node: Node) -> None:
    sender = node.session("OUT")
    node.group.put(sender, put("2.10", b"nowhere", DeliveryMode.WF_DQF, Uma.DLQ))
    done = only(sender.events, wire.PutDone)
    assert (done.delivery_status, done.uma_status) == (Status.LINK_DOWN, Status.DLQ_SUCCESS)
    dlq = node.session("DLQ")
    node.group.get(dlq, wire.Get(request_id=5, timeout_ms=0))
    dead = only(dlq.events, wire.Delivery)
    assert dead.body == b"nowhere" and dead.dead_letter_header is not None


# ---------------------------------------------------------------------- link sessions
class Wire:
    """One side of an in-memory link connection: what is sent arrives at the peer
    when the test calls `deliver()`."""

    def __init__(self) -> None:
        self.closed = False
        self.outbox: list = []
        self.peer: PeerLink | None = None
        self.reverse: Wire | None = None

    def send(self, event: object) -> None:
        if not self.closed:
            self.outbox.append(event)

    answer = send


class LinkPair:
    """Group 1 and group 2 in process, their link sessions joined by two Wires."""

    def __init__(self, directory: Path, *, replicated: bool = False) -> None:
        self.nodes = {1: open_node(directory, 1, replicated=replicated), 2: open_node(directory, 2)}
        self.now_s = 0.0
        self.links = {
            1: PeerLink(self.nodes[1].group.link_rooms, 2, now_s=lambda: self.now_s),
            2: PeerLink(self.nodes[2].group.link_rooms, 1, now_s=lambda: self.now_s),
        }
        self.wires = {1: Wire(), 2: Wire()}  # wires[n]: what group n sends

    def connect(self) -> None:
        self.wires = {1: Wire(), 2: Wire()}
        self.links[1].up(self.wires[1])
        self.links[2].up(self.wires[2])

    def disconnect(self) -> None:
        for group_id in (1, 2):
            self.wires[group_id].closed = True
            self.links[group_id].down("test cut the link")

    def run(self, rounds_max: int = 20) -> None:
        """Flush, commit and carry events both ways until nothing moves."""
        for _ in range(rounds_max):
            moved = False
            for group_id, peer_id in ((1, 2), (2, 1)):
                if self.links[group_id].channel is not None:
                    self.links[group_id].flush()
                moved |= self.nodes[group_id].writer.pending
                self.nodes[group_id].commit()
                outbox, self.wires[group_id].outbox = self.wires[group_id].outbox, []
                for event in outbox:
                    moved = True
                    self.links[peer_id].handle(event, self.wires[peer_id])
            if not moved:
                return
        raise AssertionError("the link never settled")

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()


@pytest.fixture
def pair(tmp_path: Path):
    linked = LinkPair(tmp_path)
    yield linked
    linked.close()


def test_saf_message_crosses_and_leaves_the_senders_saf(pair: LinkPair) -> None:
    sender = pair.nodes[1].session("OUT")
    pair.nodes[1].group.put(sender, put("2.10", b"across", DeliveryMode.WF_SAF))
    pair.nodes[1].commit()
    assert pair.nodes[1].store.count(Journal.SAF) == 1
    pair.connect()
    pair.run()
    assert pair.nodes[1].store.count(Journal.SAF) == 0  # deleted once the peer stored it
    assert pair.nodes[2].store.count(Journal.DQF) == 1
    receiver = pair.nodes[2].session("IN")
    pair.nodes[2].group.get(receiver, wire.Get(request_id=1, timeout_ms=0))
    pair.nodes[2].commit()
    delivery = only(receiver.events, wire.Delivery)
    assert (delivery.body, delivery.source, delivery.target) == (b"across", "1.11", "2.10")


def test_conf_put_is_reported_when_the_remote_receiver_confirms(pair: LinkPair) -> None:
    pair.connect()
    sender = pair.nodes[1].session("OUT")
    pair.nodes[1].group.put(sender, put("2.10", b"conf", DeliveryMode.WF_CONF))
    pair.run()
    assert not any(isinstance(event, wire.PutDone) for event in sender.events)
    receiver = pair.nodes[2].session("IN")
    pair.nodes[2].group.get(receiver, wire.Get(request_id=1, timeout_ms=0))
    pair.nodes[2].commit()
    seq = only(receiver.events, wire.Delivery).seq
    pair.nodes[2].group.confirm(
        receiver, wire.Confirm(request_id=2, seq=seq, confirm_value=0, force_j=0)
    )
    pair.run()  # the durable CONF notice travels back
    done = only(sender.events, wire.PutDone)
    assert (done.seq, done.delivery_status) == (seq, Status.SUCCESS)
    assert pair.nodes[2].store.count(Journal.NOTICES) == 0  # deleted once answered


def test_direct_message_in_flight_when_the_link_drops_goes_to_the_saf(pair: LinkPair) -> None:
    pair.connect()
    sender = pair.nodes[1].session("OUT")
    pair.nodes[1].group.put(sender, put("2.10", b"maybe", DeliveryMode.WF_DQF))
    pair.links[1].flush()  # sent, never answered
    assert pair.links[1].status_info()["in_flight"] == 1
    pair.disconnect()
    pair.nodes[1].commit()
    done = only(sender.events, wire.PutDone)
    assert done.delivery_status == Status.SAF_FORCED
    assert pair.nodes[1].store.count(Journal.SAF) == 1
    pair.connect()
    pair.run()
    assert pair.nodes[1].store.count(Journal.SAF) == 0
    assert pair.nodes[2].store.count(Journal.DQF) == 1


def test_resent_message_is_stored_once(pair: LinkPair) -> None:
    """The peer stored it but its answer was lost: the resend is answered with the
    first copy's seq, and the peer's DQF holds one record."""
    pair.connect()
    sender = pair.nodes[1].session("OUT")
    pair.nodes[1].group.put(sender, put("2.10", b"once", DeliveryMode.WF_DQF))
    pair.links[1].flush()
    for event in pair.wires[1].outbox:  # the peer gets it and stores it...
        pair.links[2].handle(event, pair.wires[2])
    pair.nodes[2].commit()
    pair.disconnect()  # ...but its LinkAck never arrives
    pair.nodes[1].commit()
    pair.connect()
    pair.run()
    assert pair.nodes[2].store.count(Journal.DQF) == 1
    assert pair.nodes[1].store.count(Journal.SAF) == 0


def test_drain_refused_dqf_full_backs_off_until_room(pair: LinkPair) -> None:
    """Group 1's DQF holds 5: a drain of 6 stores 5, waits in RETRY on the clock it
    is given, and finishes once a receiver confirms (a "room" notice ends the wait)."""
    back = pair.nodes[2].session("OUT")
    for index in range(1, 7):
        pair.nodes[2].group.put(back, put("1.10", b"r", DeliveryMode.WF_SAF, request_id=index))
    pair.nodes[2].commit()
    pair.connect()
    pair.run()
    assert pair.nodes[1].store.count(Journal.DQF) == 5
    info = pair.links[2].status_info()
    assert info["drain"] == "retry" and info["drain_wait"]["status"] == "DQF_FULL"
    receiver = pair.nodes[1].session("IN")
    pair.nodes[1].group.get(receiver, wire.Get(request_id=1, timeout_ms=0))
    pair.nodes[1].commit()
    seq = only(receiver.events, wire.Delivery).seq
    pair.nodes[1].group.confirm(
        receiver, wire.Confirm(request_id=2, seq=seq, confirm_value=0, force_j=0)
    )
    pair.run()
    assert pair.links[2].status_info()["drain"] == "running"
    assert pair.nodes[2].store.count(Journal.SAF) == 0
    assert pair.nodes[1].store.count(Journal.DQF) == 5


def test_a_drain_in_retry_resends_the_stuck_message_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Group 1 refuses a message too big for it and group 2 has no DLQ: group 2's
    drain goes into RETRY. Each retry sends the stuck message alone, not the ten
    behind it again, and the RETRY is logged once, not once per retry."""
    bus = BUS.replace("dqf_messages_max = 5", "dqf_messages_max = 5\nmessage_bytes_max = 100")
    bus = bus.replace('data_dir = "g2"', 'data_dir = "g2"\ndead_letter_queue = false')
    monkeypatch.setattr(sys.modules[__name__], "BUS", bus)
    pair = LinkPair(tmp_path)
    try:
        back = pair.nodes[2].session("OUT")
        pair.nodes[2].group.put(back, put("1.10", b"B" * 200, DeliveryMode.WF_DQF, Uma.SAF))
        for index in range(20, 30):
            pair.nodes[2].group.put(back, put("1.10", b"r", DeliveryMode.WF_SAF, request_id=index))
        pair.nodes[2].commit()
        pair.connect()
        pair.run()
        link = pair.links[2]
        assert link.messages_sent == 11  # the first pass: the whole backlog
        for _ in range(5):
            pair.now_s = link.retry_until
            pair.run()
            info = link.status_info()
            assert info["drain"] == "retry" and info["drain_wait"]["status"] == "MSGTOOBIG"
        assert (link.messages_sent, link.messages_resent) == (11, 5)
        assert pair.nodes[1].store.count(Journal.DQF) == 0
        assert pair.nodes[2].store.count(Journal.SAF) == 11
        warnings = [record for record in caplog.records if record.levelname == "WARNING"]
        assert len(warnings) == 1 and "SAF drain in RETRY" in warnings[0].message
    finally:
        pair.close()


# ---------------------------------------------------------------------- cold backlog
@pytest.fixture
def small_window(monkeypatch):
    """A window of 8 entries (refilled below 4), so a few dozen messages go cold."""
    monkeypatch.setattr("mrs.group.queues.WINDOW_ENTRIES_MAX", 8)
    monkeypatch.setattr("mrs.group.queues.REFILL_BELOW", 4)


def take_all(node: Node, queue: str, count: int) -> list[wire.Delivery]:
    receiver = node.session(queue)
    got = []
    for request_id in range(1, count + 1):
        node.group.get(receiver, wire.Get(request_id=request_id, timeout_ms=0))
        node.commit()
        delivery = receiver.events.pop()
        assert isinstance(delivery, wire.Delivery), delivery
        got.append(delivery)
        if delivery.delivery_status in (Status.CONFIRMREQ, Status.POSSDUPL):
            confirm = wire.Confirm(
                request_id=request_id, seq=delivery.seq, confirm_value=0, force_j=0
            )
            node.group.confirm(receiver, confirm)
            node.commit()
    return got


def test_backlog_beyond_the_window_is_kept_as_seqs_and_read_back_in_order(
    tmp_path: Path, small_window
) -> None:
    node = open_node(tmp_path, 1, dqf_messages_max=100)
    sender = node.session("OUT")
    for index in range(1, 31):
        node.group.put(sender, put("IN", b"m%d" % index, DeliveryMode.WF_DQF, request_id=index))
    node.commit()
    queue = node.group.queues[10]
    assert (len(queue.pending), queue.pending.cold_count) == (8, 22)  # 22 cost 8 bytes each
    assert node.group.status_info()["queues"]["1.10"]["pending"] == 30
    got = take_all(node, "IN", 30)
    assert [delivery.body for delivery in got] == [b"m%d" % index for index in range(1, 31)]
    assert (queue.waiting, node.store.count(Journal.DQF)) == (0, 0)
    node.close()


def test_memory_message_behind_cold_ones_keeps_its_place(tmp_path: Path, small_window) -> None:
    node = open_node(tmp_path, 1, dqf_messages_max=100)
    sender = node.session("OUT")
    for index in range(1, 13):
        node.group.put(sender, put("IN", b"d%d" % index, DeliveryMode.WF_DQF, request_id=index))
    node.commit()
    node.group.put(sender, put("IN", b"mem", DeliveryMode.NN_MEM, request_id=20))
    node.group.put(sender, put("IN", b"last", DeliveryMode.WF_DQF, request_id=21))
    node.commit()
    bodies = [delivery.body for delivery in take_all(node, "IN", 14)]
    assert bodies == [b"d%d" % index for index in range(1, 13)] + [b"mem", b"last"]
    node.close()


def test_restart_with_a_cold_backlog_keeps_order_and_delivery_marks(
    tmp_path: Path, small_window
) -> None:
    first = open_node(tmp_path, 1, dqf_messages_max=100)
    sender = first.session("OUT")
    for index in range(1, 21):
        first.group.put(sender, put("IN", b"r%d" % index, DeliveryMode.WF_DQF, request_id=index))
    first.commit()
    receiver = first.session("IN")
    for request_id in range(1, 11):  # delivered, never confirmed: 9 and 10 come back cold
        first.group.get(receiver, wire.Get(request_id=request_id, timeout_ms=0))
        first.commit()
    first.close()
    second = open_node(tmp_path, 1, dqf_messages_max=100)
    queue = second.group.queues[10]
    cold = queue.pending.cold_count
    assert (len(queue.pending), cold) == (0, 20)  # start-up read keys, no record
    got = take_all(second, "IN", 20)
    assert [delivery.body for delivery in got] == [b"r%d" % index for index in range(1, 21)]
    statuses = [delivery.delivery_status for delivery in got]
    assert statuses == [Status.POSSDUPL] * 10 + [Status.CONFIRMREQ] * 10
    second.close()


def test_architecture_example_runs() -> None:
    """docs/examples/group_in_process.py (docs/architecture.md) says what it shows."""
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "group_in_process.py"
    result = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=True
    )
    assert "before the commit: 0 answers, 0 in DQF" in result.stdout
    assert "ORDERS got b'order 17' (CONFIRMREQ)" in result.stdout
    assert "confirmed: DQF 0, PCJ 1" in result.stdout
    assert "2500 waiting: 1000 in memory, 1500 as seqs on disk" in result.stdout
    assert "after a restart: 2500 waiting: 0 in memory, 2500 as seqs on disk" in result.stdout
    assert "one get later: 999 in memory, 1500 as seqs, got b'xxxxx'" in result.stdout


def test_a_saf_record_committed_behind_the_drain_is_still_sent(tmp_path: Path) -> None:
    """Group 1 as a replicated group's active: its answers wait for a replica. An
    AK_CONF put to another group journals its owed MRS_ACK first and writes its SAF
    record only once that is answered, so another producer's later seq can be
    committed, and drained, before it. The drain reads the SAF in seq order from a
    cursor: the record landed behind it and waited for the next connection while
    the producer's next message went ahead (`mrs sim swarm --replicated`, seeds 537,
    939 and 972: order violations; 688: a SAF record left behind)."""
    pair = LinkPair(tmp_path, replicated=True)
    try:
        active = pair.nodes[1]
        pair.connect()
        one, other = active.session("OUT"), active.session("IN")
        first = msgspec.structs.replace(put("2.10", b"first", DeliveryMode.AK_CONF), resp_q="1.11")
        active.group.put(one, first)
        active.writer.commit_pending()  # its owed MRS_ACK: durable here, not yet answered
        active.group.put(other, put("2.10", b"other", DeliveryMode.WF_SAF, request_id=8))
        active.writer.commit_pending()  # a later seq in the SAF, not yet answered either
        pair.links[1].flush()  # the drain sends it: its cursor passes the first seq
        active.replica_acks()  # the AK_CONF put is answered; its SAF record is submitted
        assert only(one.events, wire.PutDone).status == Status.SUCCESS
        active.group.put(one, put("2.10", b"next", DeliveryMode.WF_SAF, request_id=9))
        active.writer.commit_pending()  # "first" and "next" land together
        pair.run()
        assert active.store.count(Journal.SAF) == 0
        receiver = pair.nodes[2].session("IN")
        bodies = []
        for request_id in (1, 2, 3):
            pair.nodes[2].group.get(receiver, wire.Get(request_id=request_id, timeout_ms=0))
            pair.nodes[2].commit()
            bodies.append(only(receiver.events, wire.Delivery).body)
            receiver.events.clear()
        assert bodies.index(b"first") < bodies.index(b"next")  # the producer's order
    finally:
        pair.close()


def cross_one_saf_message(pair: LinkPair) -> wire.LinkTransfer:
    """Put b"first" from group 1 to 2.10 through the SAF, let it cross, and return the
    transfer that carried it (for a test to send again, as a lying peer would)."""
    sender = pair.nodes[1].session("OUT")
    pair.nodes[1].group.put(sender, put("2.10", b"first", DeliveryMode.WF_SAF))
    pair.nodes[1].commit()
    pair.connect()
    pair.links[1].flush()
    transfer = next(e for e in pair.wires[1].outbox if isinstance(e, wire.LinkTransfer))
    pair.run()
    return transfer


def with_body(transfer: wire.LinkTransfer, body: bytes) -> wire.LinkTransfer:
    """`transfer` with every message's body replaced: another message under its seqs."""
    messages = [msgspec.structs.replace(m, body=body) for m in transfer.messages]
    return msgspec.structs.replace(transfer, messages=messages)


def receiver_answers(pair: LinkPair, transfer: wire.LinkTransfer) -> list[Status]:
    """Hand `transfer` to group 2's link, commit, and return its answer's statuses."""
    pair.wires[2].outbox.clear()
    pair.links[2].handle(transfer, pair.wires[2])
    pair.nodes[2].commit()
    (answer,) = [e for e in pair.wires[2].outbox if isinstance(e, wire.LinkAck)]
    return [result.status for result in answer.results]


def test_a_peer_resending_what_it_forgot_neither_overwrites_nor_doubles_it(
    pair: LinkPair,
) -> None:
    """A peer forgets a message's dedupe key here once its SAF record is gone. Sent
    again after that (a bug, a lie), the message used to overwrite its DQF record and
    queue a second copy of the seq; another message under that seq (a peer rebuilt
    from nothing and reset counts its seqs from 1 again) overwrote the one held, lost
    at the next restart. The same message is answered stored; another one is refused
    DQF_FULL (it waits in its sender's SAF); the message is delivered once, as it came."""
    transfer = cross_one_saf_message(pair)
    assert pair.nodes[1].store.count(Journal.SAF) == 0
    assert pair.nodes[2].store.count(Journal.DEDUPE) == 0  # forgotten, as the peer asked
    assert receiver_answers(pair, transfer) == [Status.STORED]
    assert receiver_answers(pair, with_body(transfer, b"other")) == [Status.DQF_FULL]
    receiver = pair.nodes[2].session("IN")
    pair.nodes[2].group.get(receiver, wire.Get(request_id=1, timeout_ms=0))
    pair.nodes[2].commit()
    assert only(receiver.events, wire.Delivery).body == b"first"
    with pytest.raises(Refused):  # no second copy of the seq
        pair.nodes[2].group.get(receiver, wire.Get(request_id=2, timeout_ms=0))
    assert pair.nodes[2].store.count(Journal.DQF) == 1


def test_a_seq_held_before_a_restart_is_still_not_stored_over(tmp_path: Path) -> None:
    """The receiving group reads a transferred seq's DQF key only up to the highest
    seq of that peer it may hold (a drain's rising seqs are never read). After a
    restart that bound comes from the DQF's keys: without it, another message under a
    seq held since before the restart was stored over it."""
    pair = LinkPair(tmp_path)
    transfer = cross_one_saf_message(pair)
    pair.close()
    pair = LinkPair(tmp_path)  # both groups restarted on their journals
    pair.connect()
    assert receiver_answers(pair, with_body(transfer, b"other")) == [Status.DQF_FULL]
    receiver = pair.nodes[2].session("IN")
    pair.nodes[2].group.get(receiver, wire.Get(request_id=1, timeout_ms=0))
    pair.nodes[2].commit()
    assert only(receiver.events, wire.Delivery).body == b"first"
    pair.close()
