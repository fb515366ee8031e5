"""Probes of the UMAs across links: a recoverable put to another group's DLQ, and the
byte bound (`queue_bytes_max`) of the queues a UMA puts a copy on in memory.

The groups run on the in-process bus (sim/membus.py: the real server code under
MockClock), so a put's PSB, where the message ends up and the queues' status are
read as a user would read them.
"""

from __future__ import annotations

import pytest
import trio

import mrs.group.umas
from clients import DeliveryMode, Status, Uma
from journals import Journal
from mrs.group.acks import MESSAGE_PREFIX
from tests.conftest import STANDARD_QUEUES
from tests.process.test_links import wait_for_link
from tests.unit.test_uma_probe_32 import restart_faultless, take_one

QUEUES = STANDARD_QUEUES  # 10 ORDERS, 13 SENDER
SMALL_QUEUES = {1: "[group.guards]\nqueue_bytes_max = 2000"}
"""Group 1's queues hold at most 2000 bytes of memory bodies (two 900-byte ones)."""
SMALL_MESSAGES = {1: "message_bytes_max = 1000"}
"""queue_bytes_max may be no less than message_bytes_max (mrs.config.guards)."""
BODY = b"b" * 900


@pytest.mark.parametrize("link", ["up", "down"])
@pytest.mark.parametrize(
    "mode, uma, answered",
    [
        (DeliveryMode.WF_DQF, Uma.SAF, Status.SAF_FAILED),
        (DeliveryMode.WF_SAF, Uma.DLJ, Status.DLJ_SUCCESS),
    ],
)
async def test_a_recoverable_put_to_another_groups_memory_dlq_answers_no_dqf(
    make_mem_linked, link: str, mode: DeliveryMode, uma: Uma, answered: Status
) -> None:
    """Group 2's DLQ is memory only: it has no DQF, as group 1's own has none, so the
    put answers NO_DQF and takes its UMA, and no SAF can forward it anywhere.
    Before: NO_DQF (LINK_DOWN with the link down) + SAF_SUCCESS, or STORED for a
    WF_SAF put, and the channel rules then put the message on that very DLQ,
    journaled, its header saying it could not go to 2.96."""
    linked = await make_mem_linked(queues=QUEUES, started=(1, 2) if link == "up" else (1,))
    if link == "up":
        await wait_for_link(linked, 1, 2)
    async with linked.connect(1, "1.13") as sender:
        own = await sender.put(b"x", target="1.96", delivery=mode, uma=uma)
        psb = await sender.put(b"x", target="2.96", delivery=mode, uma=uma)
    assert (own.delivery_status, own.uma_status) == (Status.NO_DQF, answered)
    assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, answered)
    if link == "down":
        await linked.memory.start(2)
    info = await wait_for_link(linked, 1, 2)
    assert info["saf_backlog"] == 0
    async with linked.connect(2, "2.96") as dead_letters:
        assert await take_one(dead_letters, 2) is None


async def test_a_message_returned_past_queue_bytes_max_answers_rts_fail(make_mem_linked) -> None:
    """UMA RTS puts a copy in the sender's queue's memory: past its queue_bytes_max it
    fails, as a memory put there would. Before: RTS_SUCCESS, the queue held 2700 of
    its 2000 bytes, every later put to it was refused EXCEEDQUOTA, and `mrs status`
    said "messages given back"."""
    linked = await make_mem_linked(
        queues=QUEUES, group_extras=SMALL_QUEUES, group_limits=SMALL_MESSAGES
    )
    await wait_for_link(linked, 1, 2)
    async with linked.connect(1, "1.13") as sender:
        for _ in range(2):
            await sender.put(BODY, target="1.13", delivery=DeliveryMode.WF_MEM)
        for target in ("1.50", "2.50"):
            psb = await sender.put(BODY, target=target, delivery=DeliveryMode.WF_DQF, uma=Uma.RTS)
            assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.RTS_FAIL)
        queue = (await sender.status())["queues"]["1.13"]
        assert (queue["pending"], queue.get("over_bound")) == (2, None)
        psb = await sender.put(b"small", target="1.13", delivery=DeliveryMode.WF_MEM)
        assert psb.delivery_status == Status.ENQUEUED


async def test_a_dead_letter_past_the_dlqs_queue_bytes_max_answers_dlq_failed(
    make_mem_linked,
) -> None:
    """UMA DLQ on a memory-only DLQ: bound by its bytes as a client's put there is.
    Before: DLQ_SUCCESS each time, up to 10,000 messages of any size in memory."""
    linked = await make_mem_linked(
        queues=QUEUES, group_extras=SMALL_QUEUES, group_limits=SMALL_MESSAGES
    )
    await wait_for_link(linked, 1, 2)
    async with linked.connect(1, "1.13") as sender:
        outcomes = [
            (await sender.put(BODY, target="2.50", delivery=DeliveryMode.WF_DQF, uma=Uma.DLQ))
            for _ in range(3)
        ]
        assert [psb.uma_status for psb in outcomes] == [
            Status.DLQ_SUCCESS,
            Status.DLQ_SUCCESS,
            Status.DLQ_FAILED,
        ]
        dlq = (await sender.status())["queues"]["1.96"]
        assert (dlq["pending"], dlq.get("over_bound")) == (2, None)


def _deletes_a_copy(batches) -> bool:
    return any(
        journal is Journal.META and key.startswith(MESSAGE_PREFIX)
        for batch in batches
        for journal, key in batch.deletes
    )


def _writes_the_dlj(batches) -> bool:
    return any(journal is Journal.DLJ for batch in batches for journal, _, _ in batch.puts)


@pytest.mark.parametrize(
    "uma, failed, limits",
    [
        (Uma.SAF, Status.SAF_FAILED, "saf_messages_max = 1"),  # a WF_SAF put fills it
        (Uma.DLJ, Status.DLJ_FAILED, ""),  # the DLJ write fails (EIO)
    ],
)
async def test_an_ak_conf_put_whose_uma_failed_is_not_delivered_after_a_crash(
    make_mem_linked, monkeypatch, uma: Uma, failed: Status, limits: str
) -> None:
    """An AK_CONF put to another group, link down, whose UMA SAF or DLJ fails: its
    sender is told the put failed, and puts it again. The copy journaled beside the
    MRS_ACK debt was deleted only after that, with the debt: a crash in between (made
    exact: from the telling on, deleting a copy fails, then the group is killed) resent
    the copy from the SAF at the next start, and group 2 delivered it, unmarked."""
    told: list[int] = []
    send = mrs.group.umas.Umas.send_mrs_ack

    def telling(umas, response_queue, psb) -> None:
        told.append(psb.seq)
        send(umas, response_queue, psb)

    def fault(batches) -> str | None:
        if _writes_the_dlj(batches) or (told and _deletes_a_copy(batches)):
            return "EIO"
        return None

    monkeypatch.setattr(mrs.group.umas.Umas, "send_mrs_ack", telling)
    linked = await make_mem_linked(queues=QUEUES, started=(1,), group_limits={1: limits})
    linked.store(1).fault = fault
    async with linked.connect(1, "1.13") as sender:
        if uma is Uma.SAF:
            first = await sender.put(b"first", target="2.10", delivery=DeliveryMode.WF_SAF)
            assert first.delivery_status == Status.STORED
        psb = await sender.put(b"again", target="2.10", delivery=DeliveryMode.AK_CONF, uma=uma)
        with trio.fail_after(10):
            outcome = (await sender.get(timeout=5)).ack_psb()
        assert (outcome.seq, outcome.uma_status) == (psb.seq, failed)
        linked.kill(1)
    await restart_faultless(linked)
    async with linked.connect(2, "2.10") as receiver:
        got = await take_one(receiver, 2)
        if uma is Uma.SAF:
            assert got is not None and got.body == b"first"
            await receiver.confirm(got.seq)
            got = await take_one(receiver, 2)
    assert got is None, got.body  # its sender, told the put failed, puts it again
