"""The receive side's order across a receiver leaving, a failed commit and a crash:
messages come again in the queue's order (priority, then arrival), each that was
handed out and not confirmed marked POSSDUPL and no other, and an in-order queue
accepts confirms in the order its gets returned the messages.

Rules in process (real LMDB, the production InlineWriter, a restart by closing and
reopening the journals: tests/process/test_group_rooms.py's open_node); the crash
path against a real `mrs serve` killed with SIGKILL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clients import DeliveryMode, PutItem, Status, Uma, connect
from journals import JournalError
from mrs import protocol as wire
from mrs.core.selection import by_correlation_id
from mrs.errors import Refused
from tests.process.test_group_rooms import FakeSession, Node, open_node
from tests.process.test_priority_selection import drain

BUS = """
[[group]]
id = 1
name = "G1"
listen = "127.0.0.1:0"
data_dir = "g1"
[group.limits]
dqf_messages_max = 5
[[group.queue]]
id = 10
name = "INORDER"
confirm = "explicit-in-order"
[[group.queue]]
id = 11
name = "ANY"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 13
name = "SND"
confirm = "explicit-out-of-order"
"""


def open_group(directory: Path) -> Node:
    return open_node(directory, 1, dqf_messages_max=100, bus_text=BUS)


def put_dqf(node: Node, target: str, items: list[tuple[bytes, int, bytes, int]]) -> None:
    """(body, priority, correlation id, class) each, WF_DQF from SND, all committed."""
    sender = node.session("SND")
    for request_id, (body, priority, correlation_id, msg_class) in enumerate(items, 1):
        put = wire.Put(
            request_id=request_id,
            target=target,
            body=body,
            delivery=int(DeliveryMode.WF_DQF),
            uma=int(Uma.DISC),
            msg_class=msg_class,
            msg_type=0,
            priority=priority,
            timeout_ms=0,
            correlation_id=correlation_id,
            resp_q="",
        )
        node.group.put(sender, put)
    node.commit()
    assert all(event.delivery_status == Status.STORED for event in sender.events), sender.events
    node.group.detach(sender)


def take(node: Node, session: FakeSession, select: list | None = None) -> wire.Delivery:
    """One get (polling), its delivery mark committed: the Delivery it was answered."""
    node.group.get(session, wire.Get(request_id=50, timeout_ms=0, select=select))
    node.commit()
    delivery = session.events.pop()
    assert isinstance(delivery, wire.Delivery), delivery
    return delivery


def take_rest(node: Node, queue: str) -> list[tuple[bytes, int]]:
    """What a new receiver of `queue` gets with plain gets, confirming each: (body, status)."""
    receiver = node.session(queue)
    got = []
    while True:
        try:
            node.group.get(receiver, wire.Get(request_id=60, timeout_ms=0))
        except Refused as refused:
            assert refused.status == Status.NOMOREMSG, refused
            return got
        node.commit()
        delivery = receiver.events.pop()
        got.append((delivery.body, delivery.delivery_status))
        node.group.confirm(receiver, wire.Confirm(61, delivery.seq, 0, 2))
        node.commit()
        assert isinstance(receiver.events.pop(), wire.Confirmed)


def test_a_selected_message_comes_again_at_its_place_as_after_a_restart(
    tmp_path: Path,
) -> None:
    """Before: a receiver that took m3 by its correlation id and left without
    confirming saw the next receiver get m3 first, ahead of m1 and m2 that arrived
    before it (detach put every unconfirmed message at the very front of its lane),
    while after a restart the same queue gave m1, m2, m3: the order depended on how
    the receiver went away."""
    items = [(b"m%d" % n, 0, b"c%d" % n, 0) for n in range(1, 6)]
    expected = [(b"m1", Status.CONFIRMREQ), (b"m2", Status.CONFIRMREQ)]
    expected += [(b"m3", Status.POSSDUPL), (b"m4", Status.CONFIRMREQ), (b"m5", Status.CONFIRMREQ)]
    orders = []
    for restart in (False, True):
        node = open_group(tmp_path / f"restart{restart}")
        put_dqf(node, "ANY", items)
        receiver = node.session("ANY")
        assert take(node, receiver, [["correlation_id", "eq", b"c3"]]).body == b"m3"
        if restart:
            node.close()
            node = open_group(tmp_path / f"restart{restart}")
        else:
            node.group.detach(receiver)  # its connection closed, m3 unconfirmed
        orders.append(take_rest(node, "ANY"))
        node.close()
    assert orders == [expected, expected]


def test_a_message_handed_to_a_parked_selective_get_comes_again_behind_older_ones(
    tmp_path: Path,
) -> None:
    """Before: a message that arrived for a parked selective get went to it without a
    place in the queue's arrival order; when its receiver left unconfirmed, it came
    again ahead of the older messages the selection had passed over."""
    node = open_group(tmp_path)
    put_dqf(node, "ANY", [(b"old1", 0, b"", 1), (b"old2", 0, b"", 1)])
    receiver = node.session("ANY")
    node.group.get(receiver, wire.Get(request_id=5, timeout_ms=-1, select=[["msg_class", "eq", 2]]))
    put_dqf(node, "ANY", [(b"new", 0, b"", 2)])
    node.commit()  # the delivery mark of the arrival handed to the parked get
    assert [event.body for event in receiver.events] == [b"new"]
    node.group.detach(receiver)
    assert take_rest(node, "ANY") == [
        (b"old1", Status.CONFIRMREQ),
        (b"old2", Status.CONFIRMREQ),
        (b"new", Status.POSSDUPL),
    ]
    node.close()


class FailingApply:
    """The journal store, whose commits fail while `failing` is set (a disk error)."""

    def __init__(self, store) -> None:
        self.store = store
        self.failing = False

    def apply(self, batches) -> None:
        if self.failing:
            raise JournalError("injected: the disk refused the write")
        self.store.apply(batches)

    def __getattr__(self, name: str):
        return getattr(self.store, name)


def test_confirms_that_failed_are_taken_again_in_delivery_order(tmp_path: Path) -> None:
    """Before: when confirm commits failed, the queue put its unconfirmed messages back
    in seq order, not delivery order. On an in-order queue whose gets had returned a
    higher priority first, the application's retry of its failed confirm (what
    docs/client-library.md tells it to do) answered BADSEQ "confirm <older seq> first"."""
    node = open_group(tmp_path)
    put_dqf(node, "INORDER", [(b"low", 0, b"", 0), (b"mid", 5, b"", 0), (b"high", 9, b"", 0)])
    receiver = node.session("INORDER")
    got = [take(node, receiver) for _ in range(3)]
    assert [delivery.body for delivery in got] == [b"high", b"mid", b"low"]
    failing = FailingApply(node.store)
    node.writer.store = failing
    failing.failing = True
    for request_id, delivery in enumerate(got[:2], 1):  # two confirms in flight, one commit
        node.group.confirm(receiver, wire.Confirm(request_id, delivery.seq, 0, 2))
    node.commit()
    failures = [event for event in receiver.events if isinstance(event, wire.Failure)]
    assert [failure.status for failure in failures] == [Status.JOURNAL_FAIL] * 2
    failing.failing = False
    receiver.events.clear()
    for request_id, delivery in enumerate(got, 10):  # the retry, in the order got
        node.group.confirm(receiver, wire.Confirm(request_id, delivery.seq, 0, 2))
        node.commit()
        confirmed = receiver.events.pop()
        assert isinstance(confirmed, wire.Confirmed) and confirmed.seq == delivery.seq
    node.group.detach(receiver)
    assert take_rest(node, "INORDER") == []  # all three confirmed: none comes again
    node.close()


DQF = DeliveryMode.WF_DQF




@pytest.mark.trio
async def test_after_sigkill_order_and_possdupl_hold_for_selected_and_prioritised(
    bus,
) -> None:
    """Pins the crash path: after a SIGKILL with a prioritised message confirmed, one
    taken by correlation id and one by a plain get left unconfirmed, the restarted
    group (every message cold: read back by key) serves a selective get from disk
    marked POSSDUPL, then the rest by priority and arrival, POSSDUPL on exactly the
    one other handed-out message, and its in-order queue takes confirms in that order."""
    sent = [(b"a0", 0, b"a"), (b"b0", 0, b"b"), (b"c5", 5, b"c")]
    sent += [(b"d0", 0, b"d"), (b"e5", 5, b"e"), (b"f0", 0, b"f")]
    async with connect(bus.address, queue="SENDER") as sender:
        puts = [
            PutItem(
                body, "ORDERS", delivery=DQF, uma=Uma.DLJ, priority=priority, correlation_id=cid
            )
            for body, priority, cid in sent
        ]
        for psb in await sender.put_many(puts):
            assert not isinstance(psb, Exception) and psb.delivery_status == Status.STORED
    async with connect(bus.address, queue="ORDERS") as receiver:
        first = await receiver.get(timeout=0)
        assert (first.body, first.delivery_status) == (b"c5", Status.CONFIRMREQ)
        await receiver.confirm(first.seq)
        selected = await receiver.get(timeout=0, select=by_correlation_id(b"d"))
        plain = await receiver.get(timeout=0)
        assert (selected.body, plain.body) == (b"d0", b"e5")
        bus.restart()  # SIGKILL: d0 and e5 were handed out, never confirmed
    async with connect(bus.address, queue="ORDERS") as receiver:
        again = await receiver.get(timeout=0, select=by_correlation_id(b"e"))
        assert (again.body, again.delivery_status) == (b"e5", Status.POSSDUPL)
        await receiver.confirm(again.seq)
        rest = [(message.body, message.delivery_status) for message in await drain(receiver)]
    assert rest == [
        (b"a0", Status.CONFIRMREQ),
        (b"b0", Status.CONFIRMREQ),
        (b"d0", Status.POSSDUPL),
        (b"f0", Status.CONFIRMREQ),
    ]
