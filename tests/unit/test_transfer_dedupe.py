"""The origin dedupe of SAF-drained messages, with a transfer's keys read in one pass
(mrs.group.idempotency.AppKeys.read_ahead): a seq sent twice in one transfer, or sent
again on a new connection (the sender's drain restarts after a reconnect), is stored
once and answered with the first copy's seq; the forget notice deletes its key.

Real LMDB journals and the production InlineWriter, group 2 driven in process through
its link session (the helpers of tests/process/test_group_rooms.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from journals import Journal, queue_key
from mrs import protocol as wire
from mrs.core.seqspace import GROUP_SHIFT
from mrs.errors import ProtocolError
from mrs.group.idempotency import origin_key
from mrs.group.link_session import PeerLink
from mrs.model import DeliveryMode, Status, Uma
from tests.process.test_group_rooms import Node, only, open_node, put


@dataclass(eq=False)
class Channel:
    closed: bool = False
    sent: list = field(default_factory=list)

    def send(self, event: object) -> None:
        self.sent.append(event)


GROUP_ONE = 1 << GROUP_SHIFT
"""Group 1's seqs carry its id (mrs.core.seqspace): the receiver checks it."""


def _message(seq: int) -> wire.TransferredMessage:
    return wire.TransferredMessage(
        seq, 10, 1, 11, b"body", 0, 0, 0, int(DeliveryMode.WF_DQF), int(Uma.SAF), b"", 5, None, True
    )


def _transfer(node: Node, link: PeerLink, request_id: int, seqs: list[int]) -> list:
    """Group 1 sends `seqs` in one transfer; group 2's answers once committed."""
    channel = Channel()
    link.handle(wire.LinkTransfer(request_id, [_message(seq) for seq in seqs]), channel)
    node.commit()
    (ack,) = channel.sent
    return [(result.seq, result.status, result.stored_seq) for result in ack.results]


def _dqf_records(node: Node) -> int:
    return sum(1 for _ in node.store.raw_items(Journal.DQF))


def test_a_seq_twice_in_a_transfer_or_sent_again_after_a_reconnect_is_stored_once(
    tmp_path: Path,
) -> None:
    node = open_node(tmp_path, 2)
    stored = int(Status.STORED)
    one, two, three = (GROUP_ONE | counter for counter in (1, 2, 3))  # group 1's seqs
    first = PeerLink(node.group.link_rooms, 1)
    assert _transfer(node, first, 1, [one, two, one]) == [
        (one, stored, one),
        (two, stored, two),
        (one, stored, one),
    ]
    assert _dqf_records(node) == 2
    again = PeerLink(node.group.link_rooms, 1)  # the next connection: its drain starts over
    assert _transfer(node, again, 1, [one, two, three]) == [
        (one, stored, one),
        (two, stored, two),
        (three, stored, three),
    ]
    assert _dqf_records(node) == 3
    assert node.store.get_raw(Journal.DEDUPE, origin_key(1, one).encode()) is not None
    channel = Channel()
    again.handle(wire.LinkNotice(2, [wire.ForgetNotice(one, 0)]), channel)
    node.commit()
    (ack,) = channel.sent
    assert [(result.seq, result.status) for result in ack.results] == [(one, int(Status.SUCCESS))]
    assert node.store.get_raw(Journal.DEDUPE, origin_key(1, one).encode()) is None
    assert node.store.get_raw(Journal.DEDUPE, origin_key(1, two).encode()) is not None
    node.close()


def test_a_peer_sending_another_groups_seq_breaks_the_link_and_overwrites_nothing(
    tmp_path: Path,
) -> None:
    """A group's seqs carry its id. A peer (lying, or a bug) that sent one of this
    group's own seqs had its message stored under the key of this group's message
    with that seq, over it: a message acknowledged STORED here was gone. Now the
    transfer breaks the link and nothing is written."""
    node = open_node(tmp_path, 2)
    local = node.session("IN")
    node.group.put(local, put("IN", b"acknowledged here", DeliveryMode.WF_DQF))
    node.commit()
    done = only(local.events, wire.PutDone)
    assert done.delivery_status == Status.STORED
    before = node.store.get(Journal.DQF, queue_key(10, done.seq))
    assert before is not None
    link = PeerLink(node.group.link_rooms, 1)
    with pytest.raises(ProtocolError, match="not one of group 1's"):
        link.handle(wire.LinkTransfer(1, [_message(done.seq)]), Channel())
    node.commit()
    after = node.store.get(Journal.DQF, queue_key(10, done.seq))
    assert after is not None and after.body == b"acknowledged here"
    assert _dqf_records(node) == 1
    node.close()
