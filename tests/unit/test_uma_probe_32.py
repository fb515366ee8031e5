"""Probes of the UMA matrix across a link: an AK_CONF put to another group taking its
UMA, and what the sender's log says when the peer refuses one queue.

Such a put's message is journaled beside its MRS_ACK debt, and that copy is resent
from the SAF at the next start (docs/links.md). So the copy must be gone for good
before the UMA's outcome is anyone's to see; otherwise a crash in between both
dead-letters (or discards, or returns) the message and delivers it.

The groups run on the in-process bus (sim/membus.py: the real server code under
MockClock). "A SIGKILL once the outcome is told" is made exact: from the moment the
group makes the put's MRS_ACK, a commit that would delete the copy fails (a crash
comes before it), and the group is then killed with what it had committed.
"""

from __future__ import annotations

import logging

import pytest
import trio

import mrs.group.umas
from clients import DeliveryMode, MrsError, Status, Uma
from journals import Journal, queue_key
from mrs.group.acks import MESSAGE_PREFIX
from mrs.model import DEAD_LETTER_QUEUE
from tests.conftest import STANDARD_QUEUES
from tests.process.test_links import wait_for_link

QUEUES = STANDARD_QUEUES  # 10 ORDERS (in order), 13 SENDER (out of order)


def _deletes_a_copy(batches) -> bool:
    return any(
        journal is Journal.META and key.startswith(MESSAGE_PREFIX)
        for batch in batches
        for journal, key in batch.deletes
    )


async def take_one(client, timeout: float):
    """The next message on `client`'s queue, or None when none comes in `timeout`."""
    try:
        return await client.get(timeout=timeout)
    except MrsError as error:
        assert error.status in (Status.TIMEOUT, Status.NOMOREMSG), error
        return None


async def restart_faultless(linked) -> None:
    """Start both groups again, group 1's journal without its fault, linked again."""
    linked.store(1).fault = None
    await linked.memory.start(1)
    await linked.memory.start(2)
    await wait_for_link(linked, 1, 2)


@pytest.mark.parametrize("uma", [Uma.DLJ, Uma.DISC, Uma.RTS, Uma.DLQ])
async def test_an_ak_conf_put_dead_lettered_while_the_link_is_down_is_not_delivered_too(
    make_mem_linked, monkeypatch, uma: Uma
) -> None:
    """Before: the copy was deleted in a commit after the MRS_ACK (LINK_DOWN +
    DLJ_SUCCESS) was sent; a SIGKILL in those milliseconds left it on disk, and the
    next start sent it to group 2: delivered CONFIRMREQ, and in the DLJ too."""
    told: list[int] = []
    send = mrs.group.umas.Umas.send_mrs_ack

    def telling(umas, response_queue, psb) -> None:
        told.append(psb.seq)
        send(umas, response_queue, psb)

    monkeypatch.setattr(mrs.group.umas.Umas, "send_mrs_ack", telling)
    linked = await make_mem_linked(queues=QUEUES, started=(1,))  # group 2 is down
    linked.store(1).fault = lambda batches: "EIO" if told and _deletes_a_copy(batches) else None
    async with linked.connect(1, "1.13") as sender:
        psb = await sender.put(b"order 7", target="2.10", delivery=DeliveryMode.AK_CONF, uma=uma)
        with trio.fail_after(10):
            ack = await sender.get(timeout=5)
            while not ack.is_mrs_ack:  # RTS: the returned copy comes first
                ack = await sender.get(timeout=5)
        outcome = ack.ack_psb()
        assert (outcome.seq, outcome.delivery_status) == (psb.seq, Status.LINK_DOWN)
        assert int(outcome.uma_status) > 0, outcome  # the UMA did its job
        linked.kill(1)
    await restart_faultless(linked)
    async with linked.connect(2, "2.10") as receiver:
        delivered = await take_one(receiver, 2)
    assert delivered is None, delivered  # the sender, told it was not, would put it again


def _stores_a_dead_letter(batches) -> bool:
    first = queue_key(DEAD_LETTER_QUEUE, 0)[:-8]
    return any(
        journal is Journal.DQF and key.startswith(first)
        for batch in batches
        for journal, key, _ in batch.puts
    )


async def test_an_ak_conf_put_killed_before_its_recoverable_dlq_copy_commits_is_kept(
    make_mem_linked, monkeypatch
) -> None:
    """UMA DLQ on a recoverable DLQ: the message's journaled copy is deleted in the
    commit that stores the DLQ copy, so a crash before that commit keeps the message
    (resent from the SAF at the next start). A delete of its own first, as for the
    UMAs that store nothing, lost it: in no DLQ, never delivered, its sender told
    nothing. The crash: from the DLQ copy's commit on, nothing commits or is told."""
    crashed: list[bool] = []
    send = mrs.group.umas.Umas.send_mrs_ack
    monkeypatch.setattr(
        mrs.group.umas.Umas,
        "send_mrs_ack",
        lambda umas, queue, psb: None if crashed else send(umas, queue, psb),
    )

    def crash_at_the_dead_letter(batches) -> str | None:
        if crashed or _stores_a_dead_letter(batches):
            crashed.append(True)
            return "EIO"
        return None

    linked = await make_mem_linked(
        queues=QUEUES, started=(1,), group_extras={1: "dead_letter_queue_recoverable = true"}
    )
    linked.store(1).fault = crash_at_the_dead_letter
    async with linked.connect(1, "1.13") as sender:
        await sender.put(b"7", target="2.10", delivery=DeliveryMode.AK_CONF, uma=Uma.DLQ)
        with trio.fail_after(10):
            while not crashed:
                await trio.sleep(0.01)
        linked.kill(1)
    await restart_faultless(linked)
    async with linked.connect(2, "2.10") as receiver:
        delivered = await take_one(receiver, 5)
    assert delivered is not None and delivered.body == b"7"  # acknowledged: never lost


async def test_a_peer_refusing_one_queue_is_named_by_that_queue_not_the_whole_group(
    make_mem_linked, caplog
) -> None:
    """Before: a put to a queue group 2 does not have was logged "group 2 refuses
    direct puts NO_DQF: ...; `mrs status` of group 2 says why", which sends the
    operator to a group that is well (and whose status says nothing of a queue number
    it never had). A full DQF is still the group's own line."""
    linked = await make_mem_linked(queues=QUEUES)
    await wait_for_link(linked, 1, 2)
    with caplog.at_level(logging.WARNING, logger="mrs.forwarding"):
        async with linked.connect(1, "1.13") as sender:
            psb = await sender.put(
                b"typo", target="2.50", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC
            )
            assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.DISC_SUCCESS)
    said = [r.getMessage() for r in caplog.records if "refuses" in r.getMessage()]
    assert said == [
        "group 2 refuses puts to 2.50 (NO_DQF: it has no such queue, or no DQF for it): "
        "each takes its UMA here"
    ], said
