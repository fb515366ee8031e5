"""SAF-drained messages that end on a dead letter queue instead of their target, on real
`mrs serve` processes linked through a fault proxy: the sender of a CONF mode is told
(it would never hear of a confirm), and the receiving group queues one copy however
often the link drops before its DLQ_SUCCESS answer reaches the sender
(docs/undeliverable.md "Channel rules", docs/links.md)."""

from __future__ import annotations

import pytest
import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma
from tests.process.test_conformance import WAIT_S, cut, start_bus, wait_until

MODE = DeliveryMode
NOWHERE = "2.50"  # group 2 has no queue 50: a drained message to it is dead-lettered there


def backlog(status: dict) -> int:
    return status["links"]["2"]["saf_backlog"]


async def nothing_more(client) -> None:
    """The client's queue holds nothing now (no second copy, no second MRS_ACK)."""
    with pytest.raises((NoMoreMessages, MrsError)):
        await client.get(timeout=0)


async def test_conf_puts_forced_through_the_saf_hear_that_the_peer_dead_lettered_them(
    tmp_path, nursery
) -> None:
    """Group 1 has a SAF backlog for group 2 (link cut), so a WF_CONF and an AK_CONF
    put to a queue group 2 does not have are SAF_FORCED; once the link heals group 2
    puts them on its DLQ (channel rules) and answers DLQ_SUCCESS. Before, no confirm
    notice ever came: the WF_CONF put answered TIMEOUT and the AK_CONF sender never got
    an MRS_ACK. Now each is told NO_DQF + DLQ_SUCCESS with its seq, once."""
    bus = await start_bus(tmp_path, nursery)
    try:
        async with bus.connect(1, "OUT") as sender, bus.connect(2, "DLQ") as dead:
            await cut(bus)
            await sender.put(b"first", target="2.10", delivery=MODE.WF_SAF, uma=Uma.DISC)
            ak = await sender.put(b"ak", target=NOWHERE, delivery=MODE.AK_CONF, uma=Uma.DLQ)
            answered: list = []

            async def wf_conf() -> None:
                answered.append(
                    await sender.put(
                        b"wf", target=NOWHERE, delivery=MODE.WF_CONF, uma=Uma.DLQ, timeout=WAIT_S
                    )
                )

            async with trio.open_nursery() as puts:
                puts.start_soon(wf_conf)
                await wait_until(bus, 1, lambda status: backlog(status) == 3)
                bus.proxy(1, 2).heal()
            [psb] = answered
            assert (psb.status, psb.delivery_status, psb.uma_status) == (
                Status.SUCCESS,
                Status.NO_DQF,
                Status.DLQ_SUCCESS,
            )
            ack = await sender.get(timeout=WAIT_S)
            assert ack.is_mrs_ack
            assert (ack.ack_psb().seq, ack.ack_psb().delivery_status, ack.ack_psb().uma_status) == (
                ak.seq,
                Status.NO_DQF,
                Status.DLQ_SUCCESS,
            )
            bodies = [(await dead.get(timeout=WAIT_S)).body for _ in range(2)]
            assert bodies == [b"ak", b"wf"]
            assert backlog(await wait_until(bus, 1, lambda status: backlog(status) == 0)) == 0
            await nothing_more(sender)
    finally:
        bus.stop()


async def test_an_ak_conf_mrs_ack_owed_across_a_sigkill_comes_when_it_is_dead_lettered(
    tmp_path, nursery
) -> None:
    """The AK_CONF put waits in group 1's SAF behind a backlog; group 1 is SIGKILLed and
    started again (its waiter in memory is gone, the MRS_ACK owed is journaled); the
    link heals, group 2 dead-letters the message. Before, the MRS_ACK never came and
    its journaled debt stayed; now it comes once, from the journal."""
    bus = await start_bus(tmp_path, nursery)
    try:
        await cut(bus)
        async with bus.connect(1, "OUT") as sender:
            await sender.put(b"first", target="2.10", delivery=MODE.WF_SAF, uma=Uma.DISC)
            ak = await sender.put(b"ak", target=NOWHERE, delivery=MODE.AK_CONF, uma=Uma.DISC)
        await wait_until(bus, 1, lambda status: backlog(status) == 2)
        await trio.to_thread.run_sync(bus.processes[1].kill)
        await trio.to_thread.run_sync(bus.processes[1].start)
        async with bus.connect(1, "OUT") as sender:
            bus.proxy(1, 2).heal()
            ack = await sender.get(timeout=WAIT_S)
            assert (ack.ack_psb().seq, ack.ack_psb().delivery_status, ack.ack_psb().uma_status) == (
                ak.seq,
                Status.NO_DQF,
                Status.DLQ_SUCCESS,
            )
            await wait_until(bus, 1, lambda status: backlog(status) == 0)
            await nothing_more(sender)
    finally:
        bus.stop()


@pytest.mark.parametrize("recoverable_dlq", [False, True], ids=["memory-dlq", "journaled-dlq"])
async def test_a_dead_lettered_message_whose_answer_was_lost_is_queued_once(
    tmp_path, nursery, recoverable_dlq: bool
) -> None:
    """Group 2 dead-letters a drained message and its DLQ_SUCCESS answer is lost
    (blackholed); the link drops and group 1 resends it. Before, group 2 queued a second
    copy on its DLQ, delivered CONFIRMREQ like the first: a duplicate without the
    POSSDUPL mark. With a journaled DLQ group 2 is also SIGKILLed before the resend
    (the journaled origin key, not memory, must catch it). Now one copy."""
    extras = {2: "dead_letter_queue_recoverable = true"} if recoverable_dlq else {}
    bus = await start_bus(tmp_path, nursery, group_extras=extras)
    try:
        bus.proxy(1, 2).blackhole("backward")
        async with bus.connect(1, "OUT") as sender:
            await sender.put(b"once", target=NOWHERE, delivery=MODE.WF_SAF, uma=Uma.DISC)
        if recoverable_dlq:
            await wait_until(bus, 2, lambda status: status["dqf_messages"] == 1)
            await trio.to_thread.run_sync(bus.processes[2].kill)
            await trio.to_thread.run_sync(bus.processes[2].start)
        async with bus.connect(2, "DLQ") as dead:
            first = await dead.get(timeout=WAIT_S)
            assert first.body == b"once" and first.dead_letter_header["reason"] == 2085
            await dead.confirm(first.seq)
            bus.proxy(1, 2).cut()
            bus.proxy(1, 2).heal()
            await wait_until(bus, 1, lambda status: backlog(status) == 0)
            await nothing_more(dead)
    finally:
        bus.stop()
