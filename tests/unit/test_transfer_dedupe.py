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

from journals import Journal
from mrs import protocol as wire
from mrs.group.idempotency import origin_key
from mrs.group.link_session import PeerLink
from mrs.model import DeliveryMode, Status, Uma
from tests.process.test_group_rooms import Node, open_node


@dataclass(eq=False)
class Channel:
    closed: bool = False
    sent: list = field(default_factory=list)

    def send(self, event: object) -> None:
        self.sent.append(event)


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
    first = PeerLink(node.group.link_rooms, 1)
    assert _transfer(node, first, 1, [1, 2, 1]) == [(1, stored, 1), (2, stored, 2), (1, stored, 1)]
    assert _dqf_records(node) == 2
    again = PeerLink(node.group.link_rooms, 1)  # the next connection: its drain starts over
    assert _transfer(node, again, 1, [1, 2, 3]) == [(1, stored, 1), (2, stored, 2), (3, stored, 3)]
    assert _dqf_records(node) == 3
    assert node.store.get_raw(Journal.DEDUPE, origin_key(1, 1).encode()) is not None
    channel = Channel()
    again.handle(wire.LinkNotice(2, [wire.ForgetNotice(1, 0)]), channel)
    node.commit()
    (ack,) = channel.sent
    assert [(result.seq, result.status) for result in ack.results] == [(1, int(Status.SUCCESS))]
    assert node.store.get_raw(Journal.DEDUPE, origin_key(1, 1).encode()) is None
    assert node.store.get_raw(Journal.DEDUPE, origin_key(1, 2).encode()) is not None
    node.close()
