"""An AK sender that never reads its MRS_ACKs cannot grow its response queue for ever.

Why a user cares: every MRS_ACK is a message in the response queue's memory. A
sender putting AK messages in a loop and never getting its acknowledgements (a bug, a
stuck thread) held one more message per put, past the queue's `messages_max`, until
the server ran out of memory for everyone. The bound is the queue's own: an AK put
whose response queue already holds `messages_max` messages is refused EXCEEDQUOTA
before anything is stored, as a put to that queue would be.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from mrs.errors import Refused
from mrs.model import DeliveryMode, Status
from tests.process.test_group_rooms import BUS, open_node, put

REPLIES_MAX = 2
BOUNDED_BUS = BUS.replace(
    'name = "OUT"\nconfirm = "explicit-out-of-order"',
    f'name = "OUT"\nconfirm = "explicit-out-of-order"\nmessages_max = {REPLIES_MAX}',
    1,
)


def test_an_ak_put_is_refused_while_its_response_queue_holds_messages_max(
    tmp_path: Path,
) -> None:
    assert BOUNDED_BUS != BUS
    node = open_node(tmp_path, 1, dqf_messages_max=100, bus_text=BOUNDED_BUS)
    sender = node.session("OUT")  # OUT is the response queue: its own
    for request_id in range(1, REPLIES_MAX + 1):
        node.group.put(sender, put("IN", b"order", DeliveryMode.AK_DQF, request_id=request_id))
        node.commit()
    queue = node.group.queues[11]
    assert queue.memory_count == REPLIES_MAX  # one MRS_ACK per stored put, none read

    with pytest.raises(Refused) as refused:
        node.group.put(sender, put("IN", b"one too many", DeliveryMode.AK_DQF, request_id=9))
    assert refused.value.status == Status.EXCEEDQUOTA
    assert "response queue 1.11 holds messages_max=2" in str(refused.value)
    node.commit()
    assert node.group.queues[10].waiting == REPLIES_MAX  # the refused put was not stored

    to_other = msgspec.structs.replace(put("IN", b"elsewhere", DeliveryMode.AK_DQF), resp_q="1.10")
    node.group.put(sender, to_other)  # another response queue with room: accepted
    node.commit()
    assert node.group.queues[10].waiting == REPLIES_MAX + 2  # the put and its MRS_ACK
    node.close()


def test_an_ak_put_is_refused_while_its_response_groups_mrs_acks_are_at_their_bound(
    tmp_path: Path,
) -> None:
    """Group 2 unreachable: the MRS_ACKs owed to its queue 2.11 pile up to
    ACKS_OWED_PER_PEER_MAX, and each one past it was lost (an ERROR line each) while
    its AK put had been told SUCCESS. Now the put is refused EXCEEDQUOTA before it is
    stored, as one whose local response queue is full."""
    from mrs import protocol as wire
    from mrs.limits import ACKS_OWED_PER_PEER_MAX
    from tests.process.test_group_rooms import LinkPair

    pair = LinkPair(tmp_path)  # never connected: group 2 is down
    node = pair.nodes[1]
    sender, receiver = node.session("OUT"), node.session("IN")

    def ak_put(request_id: int) -> wire.Put:
        fields = put("IN", b"order", DeliveryMode.AK_DEQ, request_id=request_id)
        return msgspec.structs.replace(fields, resp_q="2.11")

    for request_id in range(1, ACKS_OWED_PER_PEER_MAX + 1):
        node.group.put(sender, ak_put(request_id))
        node.group.get(receiver, wire.Get(request_id=request_id, timeout_ms=0))
        if request_id % 500 == 0:
            node.commit()  # each got message's MRS_ACK is owed to group 2
    node.commit()
    assert node.group.outbound.ack_outbox.owed[2] == ACKS_OWED_PER_PEER_MAX
    with pytest.raises(Refused) as refused:
        node.group.put(sender, ak_put(ACKS_OWED_PER_PEER_MAX + 1))
    assert refused.value.status == Status.EXCEEDQUOTA
    assert "MRS_ACKs already wait for group 2" in refused.value.message
    pair.close()
