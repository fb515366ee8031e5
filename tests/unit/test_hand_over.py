"""One hand-over for a Get and a GetBatch: a failed delivery mark is undone the same way.

A Get is a batch of one (mrs.group.handover: `count_delivery`, `send_when_marked`), so
what a user depends on after the mark's commit fails holds for both shapes alike:
each message is still due (first delivery, not POSSDUPL), in its place, and held by
the queue exactly once, even when the getter's connection left before the commit
ended (its detach gave the unconfirmed message back already) or the batch lent a
read-ahead message. Real LMDB journals and the production InlineWriter, in process
(the helpers of tests/process/test_group_rooms.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from journals import JournalDeviceError
from mrs import protocol as wire
from mrs.errors import Refused
from mrs.model import DeliveryMode, Status
from tests.process.test_group_rooms import FakeSession, Node, only, open_node, put


@pytest.fixture
def node(tmp_path: Path):
    opened = open_node(tmp_path, 1)
    yield opened
    opened.close()


def _get(node: Node, session: FakeSession, request_id: int) -> None:
    node.group.get(session, wire.Get(request_id=request_id, timeout_ms=0))


def _get_batch(node: Node, session: FakeSession, request_id: int) -> None:
    node.group.get_batch(session, wire.GetBatch(request_id=request_id, count_max=2, timeout_ms=0))


GETS: dict[str, Callable[[Node, FakeSession, int], None]] = {"get": _get, "get_batch": _get_batch}


def _store(node: Node, *bodies: bytes) -> FakeSession:
    sender = node.session("OUT")
    for index, body in enumerate(bodies):
        node.group.put(sender, put("IN", body, DeliveryMode.WF_DQF, request_id=10 + index))
    node.commit()
    return sender


def _commit_failing(node: Node) -> None:
    """Commit what is pending, every transaction failing (the device broke)."""

    def hook(what: str) -> None:
        raise JournalDeviceError("journal device failed: test")

    node.store.fault_hook = hook
    node.commit()
    node.store.fault_hook = None


def _drain(node: Node, reader: FakeSession) -> list[wire.Delivery]:
    """Every message the queue holds now, got one at a time (and confirmed)."""
    got: list[wire.Delivery] = []
    while True:
        before = len(reader.events)
        try:
            _get(node, reader, 100 + before)
        except Refused as refused:
            assert refused.status == Status.NOMOREMSG, refused
            return got
        node.commit()
        event = reader.events[-1]
        assert isinstance(event, wire.Delivery), event
        got.append(event)
        if event.delivery_status not in (Status.CONFIRMREQ, Status.POSSDUPL):
            continue  # needs no confirm
        node.group.confirm(reader, wire.Confirm(200 + before, event.seq, 0, 0))
        node.commit()


@pytest.mark.parametrize("shape", GETS)
def test_a_failed_mark_puts_the_message_back_for_its_first_delivery(node: Node, shape: str) -> None:
    _store(node, b"a")
    receiver = node.session("IN")
    GETS[shape](node, receiver, 1)
    _commit_failing(node)
    assert only(receiver.events, wire.Failure).status == Status.JOURNAL_FAIL
    drained = _drain(node, receiver)
    assert [(d.body, d.delivery_status) for d in drained] == [(b"a", Status.CONFIRMREQ)]


@pytest.mark.parametrize("shape", GETS)
def test_a_failed_mark_after_the_getter_left_keeps_each_message_once(
    node: Node, shape: str
) -> None:
    _store(node, b"a", b"b")
    receiver = node.session("IN")
    GETS[shape](node, receiver, 1)
    node.group.detach(receiver)  # gives back what it had unconfirmed, before the commit ends
    _commit_failing(node)
    assert [(d.body, d.delivery_status) for d in _drain(node, node.session("IN"))] == [
        (b"a", Status.CONFIRMREQ),
        (b"b", Status.CONFIRMREQ),
    ]


def test_a_failed_mark_takes_back_the_read_ahead_lent(node: Node) -> None:
    sender = _store(node, b"kept")
    node.group.put(sender, put("IN", b"memory", DeliveryMode.NN_MEM, request_id=20))
    receiver = node.session("IN")
    request = wire.GetBatch(request_id=1, count_max=1, timeout_ms=0, read_ahead_max=4)
    node.group.get_batch(receiver, request)
    _commit_failing(node)
    assert only(receiver.events, wire.Failure).status == Status.JOURNAL_FAIL
    node.group.give_back(receiver, wire.GiveBack(seqs=[entry.seq for entry in _lent(node)]))
    assert [d.body for d in _drain(node, receiver)] == [b"kept", b"memory"]  # once each, in order


def _lent(node: Node) -> list:
    return list(node.group.ctx.queues[10].lent.values())
