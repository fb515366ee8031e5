"""An AK put re-sent under its idempotency key (a client that lost its connection
before the put's answer) is answered with the first copy's seq, and its sender gets
one MRS_ACK for the message, not one per copy: the first copy's MRS_ACK is already
made (or owed, for AK_CONF) by this run of the group. Only when the first copy was
stored by an earlier run, whose MRS_ACKs in memory died with it, does the copy bring
one. In process: real LMDB journals with fsync, the production InlineWriter."""

from __future__ import annotations

from pathlib import Path

import msgpack
import msgspec

from journals import Journal
from mrs import protocol as wire
from mrs.errors import Refused
from mrs.limits import DEDUPE_WAITERS_MAX
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
    answered = [event.seq for event in sender.events if isinstance(event, wire.PutDone)]
    assert answered == [seq, seq]  # the copy's answer names the first copy, as its MRS_ACK
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


def saf_put(request_id: int, mode: DeliveryMode) -> wire.Put:
    """A keyed put to group 2's queue whose UMA stores it in the SAF while the link is down."""
    return wire.Put(
        request_id, "2.10", b"order 1", int(mode), int(Uma.SAF),
        0, 0, 0, 0, b"", "", {"idempotency_key": "order-1"},
    )  # fmt: skip


def delivered_on_group_2(pair: LinkPair) -> wire.Delivery:
    receiver = pair.nodes[2].session("IN")
    pair.nodes[2].group.get(receiver, wire.Get(request_id=3, timeout_ms=0))
    pair.nodes[2].commit()
    return only(receiver.events, wire.Delivery)


def test_a_copy_waiting_in_the_saf_brings_no_second_mrs_ack(tmp_path: Path) -> None:
    """With the link down the first copy waits in the sender's SAF, where group 2's
    key cannot answer the copy: it brought a second MRS_ACK (SAF_FORCED) and a second
    SAF record. Now the copy is answered with the first copy's seq, and one message
    crosses when the link heals."""
    pair = LinkPair(tmp_path)
    node = pair.nodes[1]
    sender = node.session("OUT")
    for request_id in (1, 2):  # the first answer lost: the put again
        node.group.put(sender, saf_put(request_id, DeliveryMode.AK_DQF))
        pair.run()
    assert node.store.count(Journal.SAF) == 1
    first_seq = sender.events[0].seq  # an AK put is answered at once, with its own seq
    acks = mrs_acks_waiting(node, sender)
    psbs = [Psb.from_wire(msgpack.unpackb(ack.body)) for ack in acks]
    assert [(psb.delivery_status, psb.uma_status) for psb in psbs] == [
        (Status.LINK_DOWN, Status.SAF_SUCCESS)
    ]
    pair.connect()
    pair.run()
    assert pair.nodes[2].store.count(Journal.DQF) == 1
    assert node.store.count(Journal.SAF) == 0
    assert delivered_on_group_2(pair).seq == first_seq
    assert mrs_acks_waiting(node, sender) == []
    pair.close()


def test_copies_while_the_first_is_written_to_the_saf_wait_for_it(tmp_path: Path) -> None:
    """Before the first copy's SAF record is durable, copies wait for its commit and
    are answered with its seq (as local copies are); DEDUPE_WAITERS_MAX of them at
    most: one more is refused QUEUE_BUSY before it is answered."""
    pair = LinkPair(tmp_path)
    node = pair.nodes[1]
    sender = node.session("OUT")
    for request_id in range(1, DEDUPE_WAITERS_MAX + 2):  # the first, then its copies
        node.group.put(sender, saf_put(request_id, DeliveryMode.WF_DQF))
    try:
        node.group.put(sender, saf_put(DEDUPE_WAITERS_MAX + 2, DeliveryMode.WF_DQF))
    except Refused as busy:
        assert busy.status == Status.QUEUE_BUSY
    else:
        raise AssertionError("a copy past DEDUPE_WAITERS_MAX was taken")
    assert sender.events == []
    pair.run()
    assert node.store.count(Journal.SAF) == 1
    answers = [event for event in sender.events if isinstance(event, wire.PutDone)]
    assert len(answers) == DEDUPE_WAITERS_MAX + 1
    assert {answer.seq for answer in answers} == {answers[0].seq}
    pair.close()


def test_a_copy_after_a_restart_finds_its_first_copy_in_the_saf(tmp_path: Path) -> None:
    """The keys are read back from the SAF at start-up: a copy put after a restart is
    not stored again, and brings the one MRS_ACK the restart lost (SUCCESS)."""
    first = LinkPair(tmp_path)
    first.nodes[1].group.put(first.nodes[1].session("OUT"), saf_put(1, DeliveryMode.AK_DQF))
    first.run()
    first.close()

    pair = LinkPair(tmp_path)
    node = pair.nodes[1]
    sender = node.session("OUT")
    node.group.put(sender, saf_put(2, DeliveryMode.AK_DQF))
    pair.run()
    assert node.store.count(Journal.SAF) == 1
    pair.connect()
    pair.run()
    assert_one_mrs_ack_for(mrs_acks_waiting(node, sender), delivered_on_group_2(pair).seq)
    pair.close()


def test_a_copy_of_a_wf_conf_put_is_answered_at_the_first_copys_confirm(tmp_path: Path) -> None:
    """A WF_CONF put re-sent under its key (its connection lost; a replicated client
    re-sends every one after a failover) was answered at once, STORED, before the
    receiver confirmed: a WF_CONF answer says the message was confirmed. Now the copy
    waits for the first copy's confirm and is answered with it; one made after the
    confirm is answered at once."""
    node = open_node(tmp_path, 1)
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.put(sender, keyed_put(1, DeliveryMode.WF_CONF))
    node.commit()
    node.group.put(sender, keyed_put(2, DeliveryMode.WF_CONF))  # the first answer lost
    node.commit()
    assert [e for e in sender.events if isinstance(e, wire.PutDone)] == []  # both wait
    node.group.get(receiver, wire.Get(request_id=3, timeout_ms=0))
    node.commit()
    delivery = only(receiver.events, wire.Delivery)
    node.group.confirm(
        receiver, wire.Confirm(request_id=4, seq=delivery.seq, confirm_value=0, force_j=0)
    )
    node.commit()
    answers = {e.request_id: e for e in sender.events if isinstance(e, wire.PutDone)}
    assert sorted(answers) == [1, 2]
    for answer in answers.values():
        assert (answer.status, answer.delivery_status, answer.seq) == (
            Status.SUCCESS, Status.SUCCESS, delivery.seq,
        )  # fmt: skip
    sender.events.clear()
    node.group.put(sender, keyed_put(5, DeliveryMode.WF_CONF))  # after the confirm: now
    node.commit()
    assert only(sender.events, wire.PutDone).seq == delivery.seq
    assert node.group.dqf.copies_awaiting_confirm == {}
    node.close()


def test_the_same_key_with_another_body_in_the_saf_is_no_copy(tmp_path: Path) -> None:
    """Only the same key and body is a copy: another body under the key goes on as a
    message of its own (the receiving group, which holds the key, refuses it
    KEY_REUSED), never answered as the first copy here."""
    pair = LinkPair(tmp_path)
    node = pair.nodes[1]
    sender = node.session("OUT")
    node.group.put(sender, saf_put(1, DeliveryMode.WF_DQF))
    pair.run()
    other = msgspec.structs.replace(saf_put(2, DeliveryMode.WF_DQF), body=b"order 2")
    node.group.put(sender, other)
    pair.run()
    assert node.store.count(Journal.SAF) == 2
    assert len({e.seq for e in sender.events if isinstance(e, wire.PutDone)}) == 2
    pair.close()



def confirm_on_group_2(pair: LinkPair, count: int) -> list[int]:
    """Group 2's reader gets `count` messages and confirms each; their seqs."""
    node = pair.nodes[2]
    receiver = node.session("IN")
    seqs = []
    for request_id in range(count):
        node.group.get(receiver, wire.Get(request_id=100 + request_id, timeout_ms=0))
        node.commit()
        seq = [e for e in receiver.events if isinstance(e, wire.Delivery)][-1].seq
        confirm = wire.Confirm(request_id=200 + request_id, seq=seq, confirm_value=0, force_j=0)
        node.group.confirm(receiver, confirm)
        pair.run()
        seqs.append(seq)
    return seqs


def wf_conf_put(request_id: int) -> wire.Put:
    put = saf_put(request_id, DeliveryMode.WF_CONF)
    return msgspec.structs.replace(put, body=b"order 2", headers={"idempotency_key": "o-2"})


def put_done(sender: FakeSession) -> dict[int, wire.PutDone]:
    return {e.request_id: e for e in sender.events if isinstance(e, wire.PutDone)}


def test_a_wf_conf_copy_waiting_in_the_saf_is_answered_at_the_receivers_confirm(
    tmp_path: Path,
) -> None:
    """With the link up and a SAF backlog, a WF_CONF put goes to the SAF (SAF_FORCED)
    and waits for the receiver's confirm; re-sent under its key, the copy was answered
    at once, SUCCESS, before the receiver had even got it. Now both wait for the
    confirm and are answered with it. (With the link down the first copy is answered
    at once by its UMA, SAF_SUCCESS, and so is a copy.)"""
    pair = LinkPair(tmp_path)
    node = pair.nodes[1]
    sender = node.session("OUT")
    node.group.put(sender, saf_put(1, DeliveryMode.WF_DQF))  # the backlog, link down
    pair.run()
    pair.connect()
    node.group.put(sender, wf_conf_put(2))
    node.commit()
    node.group.put(sender, wf_conf_put(3))  # the first answer lost: the put again
    pair.run()
    assert sorted(put_done(sender)) == [1]  # neither WF_CONF put is confirmed yet
    assert node.store.count(Journal.SAF) == 0 and pair.nodes[2].store.count(Journal.DQF) == 2
    seqs = confirm_on_group_2(pair, 2)
    answers = put_done(sender)
    assert sorted(answers) == [1, 2, 3]
    for request_id in (2, 3):
        assert (answers[request_id].status, answers[request_id].seq) == (Status.SUCCESS, seqs[1])
    pair.close()
