"""A selective get takes the first matching message in the queue's order, whichever
group sent it.

Why a user cares: a server that takes its requests by class or correlation id
(MessageQ's `sel_filter`, IBM MQ's MQGET by CorrelId) from many sending groups must
serve them in the order they arrived, as a plain get does (docs/delivery-modes.md,
"Selective gets"). The queue's selection index kept its messages in seq order, and a
seq carries its sending group in its high bits: another group's message that arrived
first came after this group's newer one.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from mrs import protocol as wire
from mrs.errors import Refused
from mrs.model import DeliveryMode, Status
from tests.process.test_group_rooms import FakeSession, LinkPair, put

SELECTIONS = {
    "by-class": [["msg_class", "eq", 7]],
    "by-correlation-id": [["correlation_id", "eq", b"order-1"]],
}


@pytest.fixture
def pair(tmp_path: Path):
    linked = LinkPair(tmp_path)
    linked.connect()
    linked.senders = {n: linked.nodes[n].session("OUT") for n in (1, 2)}  # type: ignore[attr-defined]
    yield linked
    linked.close()


def _put(pair: LinkPair, group_id: int, body: bytes) -> None:
    """Put `body` (class 7, correlation id order-1) from group `group_id` to 2.10."""
    request = msgspec.structs.replace(
        put("2.10", body, DeliveryMode.WF_DQF), msg_class=7, correlation_id=b"order-1"
    )
    pair.nodes[group_id].group.put(pair.senders[group_id], request)  # type: ignore[attr-defined]
    pair.run()


def _get(pair: LinkPair, reader: FakeSession, select: list, timeout_ms: int = 0) -> None:
    request = wire.Get(request_id=len(reader.events) + 1, timeout_ms=timeout_ms, select=select)
    pair.nodes[2].group.get(reader, request)
    pair.nodes[2].commit()


def _delivered(reader: FakeSession) -> list[tuple[bytes, int]]:
    return [(e.body, e.delivery_status) for e in reader.events if isinstance(e, wire.Delivery)]


@pytest.mark.parametrize("select", SELECTIONS.values(), ids=SELECTIONS.keys())
def test_the_first_to_arrive_is_taken_first_whichever_group_sent_it(
    pair: LinkPair, select: list
) -> None:
    reader = pair.nodes[2].session("IN")
    with pytest.raises(Refused):  # the queue's index starts here, before the arrivals
        _get(pair, reader, [["msg_class", "eq", 99]])
    _put(pair, 2, b"first, from this group")
    _put(pair, 1, b"second, from group 1")
    _put(pair, 2, b"third, from this group")
    for _ in range(3):
        _get(pair, reader, select)
    assert [body for body, _ in _delivered(reader)] == [
        b"first, from this group",
        b"second, from group 1",
        b"third, from this group",
    ]


@pytest.mark.parametrize("select", SELECTIONS.values(), ids=SELECTIONS.keys())
def test_a_message_handed_to_a_parked_get_comes_back_before_later_ones(
    pair: LinkPair, select: list
) -> None:
    """A message handed straight to a parked selective get was never in the index; its
    receiver left without confirming, so it came back, and went behind the messages
    that arrived after it."""
    leaving = pair.nodes[2].session("IN")
    _get(pair, leaving, select, timeout_ms=60_000)  # parked: the index starts here
    _put(pair, 1, b"first")
    assert [body for body, _ in _delivered(leaving)] == [b"first"]
    _put(pair, 2, b"second")
    _put(pair, 1, b"third")
    pair.nodes[2].group.detach(leaving)  # unconfirmed: back to its place, POSSDUPL
    reader = pair.nodes[2].session("IN")
    for _ in range(3):
        _get(pair, reader, select)
    assert _delivered(reader) == [
        (b"first", Status.POSSDUPL),
        (b"second", Status.CONFIRMREQ),
        (b"third", Status.CONFIRMREQ),
    ]
