"""An AK put re-sent under its idempotency key (a client that lost its connection
before the put's answer) is answered with the first copy's seq, and its sender gets
one MRS_ACK for the message, not one per copy: the first copy's MRS_ACK is already
made (or owed, for AK_CONF) by this run of the group. Only when the first copy was
stored by an earlier run, whose MRS_ACKs in memory died with it, does the copy bring
one. In process: real LMDB journals with fsync, the production InlineWriter."""

from __future__ import annotations

from pathlib import Path

import msgpack

from journals import Journal
from mrs import protocol as wire
from mrs.errors import Refused
from mrs.model import MRS_ACK_TYPE, DeliveryMode, Psb, Status, Uma
from tests.process.test_group_rooms import FakeSession, LinkPair, Node, only, open_node


def keyed_put(request_id: int, mode: DeliveryMode, target: str = "IN") -> wire.Put:
    return wire.Put(
        request_id, target, b"order 1", int(mode), int(Uma.DLQ),
        0, 0, 0, 0, b"", "", {"idempotency_key": "order-1"},
    )  # fmt: skip


def mrs_acks_waiting(node: Node, sender: FakeSession) -> list[wire.Delivery]:
    """Every message on the sender's own queue (where its MRS_ACKs go), taken."""
    taken: list[wire.Delivery] = []
    while True:
        sender.events.clear()
        try:
            node.group.get(sender, wire.Get(request_id=90 + len(taken), timeout_ms=0))
        except Refused as empty:
            assert empty.status == Status.NOMOREMSG
            return taken
        node.commit()
        taken.append(only(sender.events, wire.Delivery))


def assert_one_mrs_ack_for(acks: list[wire.Delivery], seq: int) -> None:
    assert [ack.msg_type for ack in acks] == [MRS_ACK_TYPE], acks
    psb = Psb.from_wire(msgpack.unpackb(acks[0].body))
    assert (psb.status, psb.seq) == (Status.SUCCESS, seq)


def test_a_copy_of_a_stored_ak_put_brings_no_second_mrs_ack(tmp_path: Path) -> None:
    node = open_node(tmp_path, 1)
    sender = node.session("OUT")
    node.group.put(sender, keyed_put(1, DeliveryMode.AK_DQF))
    node.commit()
    node.group.put(sender, keyed_put(2, DeliveryMode.AK_DQF))  # the answer was lost: again
    node.commit()
    seq = only(sender.events[:1], wire.PutDone).seq
    assert_one_mrs_ack_for(mrs_acks_waiting(node, sender), seq)
    assert node.group.status_info()["dqf_messages"] == 1
    node.close()


def test_a_copy_waiting_for_the_first_copys_commit_brings_no_mrs_ack(tmp_path: Path) -> None:
    node = open_node(tmp_path, 1)
    sender = node.session("OUT")
    node.group.put(sender, keyed_put(1, DeliveryMode.AK_DQF))
    node.group.put(sender, keyed_put(2, DeliveryMode.AK_DQF))  # before the first is durable
    node.commit()
    acks = mrs_acks_waiting(node, sender)
    assert len(acks) == 1, acks
    node.close()


def test_a_copy_after_a_restart_brings_the_mrs_ack_the_restart_lost(tmp_path: Path) -> None:
    first = open_node(tmp_path, 1)
    sender = first.session("OUT")
    first.group.put(sender, keyed_put(1, DeliveryMode.AK_DQF))
    first.commit()
    first.close()  # its MRS_ACK (in memory) is gone with it, never taken

    second = open_node(tmp_path, 1)
    sender = second.session("OUT")
    second.group.put(sender, keyed_put(2, DeliveryMode.AK_DQF))
    second.commit()
    receiver = second.session("IN")
    second.group.get(receiver, wire.Get(request_id=3, timeout_ms=0))
    second.commit()
    seq = only(receiver.events, wire.Delivery).seq
    assert_one_mrs_ack_for(mrs_acks_waiting(second, sender), seq)
    second.close()


def test_a_copy_of_an_ak_conf_put_waits_for_the_one_confirm(tmp_path: Path) -> None:
    node = open_node(tmp_path, 1)
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.put(sender, keyed_put(1, DeliveryMode.AK_CONF))
    node.commit()
    node.group.put(sender, keyed_put(2, DeliveryMode.AK_CONF))
    node.commit()
    assert mrs_acks_waiting(node, sender) == []  # nothing confirmed yet: no MRS_ACK
    node.group.get(receiver, wire.Get(request_id=3, timeout_ms=0))
    node.commit()
    delivery = only(receiver.events, wire.Delivery)
    node.group.confirm(
        receiver, wire.Confirm(request_id=4, seq=delivery.seq, confirm_value=0, force_j=0)
    )
    node.commit()
    assert_one_mrs_ack_for(mrs_acks_waiting(node, sender), delivery.seq)
    node.close()


def test_a_copy_sent_to_another_group_brings_no_second_mrs_ack(tmp_path: Path) -> None:
    """The receiving group answers the copy with the first copy's seq (its dedupe
    key); the sending group, which made the first copy's MRS_ACK, makes no other."""
    pair = LinkPair(tmp_path)
    pair.connect()
    node = pair.nodes[1]
    sender = node.session("OUT")
    for request_id in (1, 2):  # the first answer lost: the put again
        node.group.put(sender, keyed_put(request_id, DeliveryMode.AK_DQF, target="2.10"))
        pair.run()
    assert pair.nodes[2].store.count(Journal.DQF) == 1
    receiver = pair.nodes[2].session("IN")
    pair.nodes[2].group.get(receiver, wire.Get(request_id=3, timeout_ms=0))
    pair.nodes[2].commit()
    assert_one_mrs_ack_for(mrs_acks_waiting(node, sender), only(receiver.events, wire.Delivery).seq)
    pair.close()
