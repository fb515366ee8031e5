"""A parked get answered from the message's own commit (its delivery mark written in the
put's transaction): one commit instead of two, and POSSDUPL still exact.

Real LMDB journals with fsync and the production InlineWriter, driven in process
(the helpers of tests/process/test_group_rooms.py). What a user depends on: the get is
answered only once message and mark are durable; arrival order is kept when an
earlier message is still being committed; a get whose connection left before the
commit loses nothing (the message comes back marked POSSDUPL, as after any lost
get); a failed commit leaves the get waiting (or answers it TIMEOUT if its time
ran out meanwhile) and marks nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from journals import Journal, JournalDeviceError, queue_key
from mrs import protocol as wire
from mrs.errors import Refused
from mrs.group.context import U32
from mrs.model import DeliveryMode, Status
from tests.process.test_group_rooms import Node, only, open_node, put


@pytest.fixture
def node(tmp_path: Path):
    opened = open_node(tmp_path, 1)
    yield opened
    opened.close()


def deliveries(events: list) -> list[wire.Delivery]:
    return [event for event in events if isinstance(event, wire.Delivery)]


def mark(node: Node, seq: int) -> int | None:
    raw = node.store.get_raw(Journal.MARKS, queue_key(10, seq))
    return None if raw is None else U32.unpack(raw)[0]


def test_parked_get_is_answered_by_the_puts_own_commit(tmp_path: Path) -> None:
    node = open_node(tmp_path, 1)
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.get(receiver, wire.Get(request_id=3, timeout_ms=-1))
    node.group.put(sender, put("IN", b"soon", DeliveryMode.WF_DQF))
    assert receiver.events == [] and sender.events == []  # nothing before the commit
    node.commit()
    delivery = only(receiver.events, wire.Delivery)
    assert (delivery.body, delivery.delivery_status) == (b"soon", Status.CONFIRMREQ)
    assert only(sender.events, wire.PutDone).delivery_status == Status.STORED
    assert node.writer.stats.commits == 1  # message and mark in one transaction
    assert mark(node, delivery.seq) == 1
    node.close()  # never confirmed: after a restart it is a possible duplicate

    again = open_node(tmp_path, 1)
    receiver = again.session("IN")
    again.group.get(receiver, wire.Get(request_id=4, timeout_ms=0))
    again.commit()
    redelivered = only(receiver.events, wire.Delivery)
    assert (redelivered.seq, redelivered.delivery_status) == (delivery.seq, Status.POSSDUPL)
    again.close()


def test_a_burst_to_parked_gets_keeps_arrival_order_in_one_commit(node: Node) -> None:
    sender, receiver = node.session("OUT"), node.session("IN")
    for request_id in range(1, 4):
        node.group.get(receiver, wire.Get(request_id=request_id, timeout_ms=-1))
    for index in range(3):
        node.group.put(
            sender, put("IN", b"m%d" % index, DeliveryMode.WF_DQF, request_id=10 + index)
        )
    node.commit()
    got = deliveries(receiver.events)
    assert [event.body for event in got] == [b"m0", b"m1", b"m2"]
    assert [event.request_id for event in got] == [1, 2, 3]  # gets served oldest first
    assert node.writer.stats.commits == 1


def test_a_message_stored_earlier_is_delivered_first(node: Node) -> None:
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.put(sender, put("IN", b"first", DeliveryMode.WF_DQF, request_id=1))
    node.group.get(receiver, wire.Get(request_id=3, timeout_ms=-1))  # parks: not durable yet
    node.group.put(sender, put("IN", b"second", DeliveryMode.WF_DQF, request_id=2))
    node.commit()  # both stored; "second" must not overtake "first"
    node.commit()  # the mark of "first", delivered the usual way
    assert [event.body for event in deliveries(receiver.events)] == [b"first"]
    node.group.get(receiver, wire.Get(request_id=4, timeout_ms=0))
    node.commit()
    assert [event.body for event in deliveries(receiver.events)] == [b"first", b"second"]


def test_a_get_whose_connection_left_before_the_commit_loses_nothing(node: Node) -> None:
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.get(receiver, wire.Get(request_id=3, timeout_ms=-1))
    node.group.put(sender, put("IN", b"kept", DeliveryMode.WF_DQF))
    node.group.detach(receiver)  # the connection is gone; its get's answer is lost
    node.commit()
    assert deliveries(receiver.events) == []
    assert node.group.status_info()["queues"]["1.10"]["pending"] == 1
    other = node.session("IN")
    node.group.get(other, wire.Get(request_id=5, timeout_ms=0))
    node.commit()
    again = only(other.events, wire.Delivery)
    assert (again.body, again.delivery_status) == (b"kept", Status.POSSDUPL)


def fail_commits(node: Node) -> None:
    def hook(what: str) -> None:
        raise JournalDeviceError("journal device failed: test")

    node.store.fault_hook = hook


def test_a_failed_commit_leaves_the_get_waiting_and_marks_nothing(node: Node) -> None:
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.get(receiver, wire.Get(request_id=3, timeout_ms=-1))
    fail_commits(node)
    node.group.put(sender, put("IN", b"lost", DeliveryMode.WF_DQF, request_id=1))
    node.commit()
    node.store.fault_hook = None
    assert only(sender.events, wire.PutDone).delivery_status != Status.STORED
    assert deliveries(receiver.events) == []
    assert node.store.count(Journal.MARKS) == 0
    node.group.put(sender, put("IN", b"next", DeliveryMode.WF_DQF, request_id=2))
    node.commit()
    delivery = only(receiver.events, wire.Delivery)
    assert (delivery.request_id, delivery.body) == (3, b"next")  # the same get, still waiting
    assert delivery.delivery_status == Status.CONFIRMREQ


def test_a_get_that_timed_out_during_a_failed_commit_is_answered_timeout(node: Node) -> None:
    sender, receiver = node.session("OUT"), node.session("IN")
    timers = node.group.ctx.timers
    before = len(timers.calls)
    node.group.get(receiver, wire.Get(request_id=3, timeout_ms=50))
    # the get's timeout bucket (mrs.group.put_deadlines): closed after a tick, expired
    # at its timeout plus that tick
    [(tick_s, close), (delay_s, expire)] = timers.calls[before:]
    assert 0 < tick_s <= 0.05 * 0.05 and delay_s == pytest.approx(0.05 + tick_s)
    fail_commits(node)
    node.group.put(sender, put("IN", b"lost", DeliveryMode.WF_DQF, request_id=1))
    close()
    expire()  # the get's time runs out while its message is being committed
    assert receiver.events == []
    node.commit()
    node.store.fault_hook = None
    failure = only(receiver.events, wire.Failure)
    assert (failure.request_id, failure.status) == (3, Status.TIMEOUT)
    assert not node.group.queues[10].waiters


def test_a_get_while_a_reserved_delivery_is_committing_respects_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """unconfirmed_max counts the delivery a commit under way will make: a second get
    taking a memory message meanwhile is refused, not delivered past the cap."""
    import tests.process.test_group_rooms as rooms

    capped = rooms.BUS.replace('name = "IN"\n', 'name = "IN"\nunconfirmed_max = 1\n', 1)
    monkeypatch.setattr(rooms, "BUS", capped)
    node = open_node(tmp_path, 1)
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.get(receiver, wire.Get(request_id=1, timeout_ms=-1))
    node.group.put(sender, put("IN", b"stored", DeliveryMode.WF_DQF, request_id=10))
    node.group.put(sender, put("IN", b"memory", DeliveryMode.NN_MEM, request_id=11))
    with pytest.raises(Refused) as refused:
        node.group.get(receiver, wire.Get(request_id=2, timeout_ms=0))
    assert refused.value.status == Status.EXCMAXUNCONF
    node.commit()
    assert [event.body for event in deliveries(receiver.events)] == [b"stored"]
    node.close()
