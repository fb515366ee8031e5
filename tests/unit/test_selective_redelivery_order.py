"""A message handed back to its queue keeps its place for selective gets too.

Why a user cares: a receiver that leaves without confirming gets its messages
redelivered first (POSSDUPL, mrs.group.queues.TargetQueue.detach), and an order
workflow that takes its orders by class or correlation id relies on the same order.
The queue's selection index used to append the returned message behind everything
that arrived after it, so a selective get took a newer message first.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from mrs import protocol as wire
from mrs.model import DeliveryMode, Status
from tests.process.test_group_rooms import FakeSession, Node, open_node, put


@pytest.fixture
def node(tmp_path: Path):
    opened = open_node(tmp_path, 1, dqf_messages_max=100)
    yield opened
    opened.close()


def _store(node: Node, correlation_id: bytes, *bodies: bytes) -> None:
    sender = node.session("OUT")
    for index, body in enumerate(bodies):
        request = put("IN", body, DeliveryMode.WF_DQF, request_id=10 + index)
        node.group.put(
            sender, msgspec.structs.replace(request, msg_class=7, correlation_id=correlation_id)
        )
    node.commit()


def _get_selected(node: Node, reader: FakeSession, select: list) -> wire.Delivery:
    node.group.get(reader, wire.Get(request_id=len(reader.events) + 1, timeout_ms=0, select=select))
    node.commit()
    event = reader.events[-1]
    assert isinstance(event, wire.Delivery), event
    return event


@pytest.mark.parametrize(
    "select",
    [[["msg_class", "eq", 7]], [["correlation_id", "eq", b"order-1"]]],
    ids=["by-class", "by-correlation-id"],
)
def test_a_message_returned_by_a_receiver_that_left_is_the_next_selective_get(
    node: Node, select: list
) -> None:
    _store(node, b"order-1", b"first", b"second", b"third")
    leaving = node.session("IN")
    taken = _get_selected(node, leaving, select)
    assert taken.body == b"first"
    node.group.detach(leaving)  # unconfirmed: back to its place, POSSDUPL

    reader = node.session("IN")
    got = [_get_selected(node, reader, select) for _ in range(3)]
    assert [(event.body, event.delivery_status) for event in got] == [
        (b"first", Status.POSSDUPL),
        (b"second", Status.CONFIRMREQ),
        (b"third", Status.CONFIRMREQ),
    ]
