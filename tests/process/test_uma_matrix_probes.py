"""Probes of the undeliverable-message rules at their edges: what the reference tables
and DESIGN.md §2 promise when the UMA itself has to store something, for every mode.

Each test runs the real group servers on the in-process bus (sim/membus.py, under
MockClock) and asserts what a user depends on: a message acknowledged as stored is
never lost, and the PSB says what really happened.
"""

from __future__ import annotations

import json
import logging

import pytest
import trio

from clients import DeliveryMode, MrsTimeout, NoMoreMessages, NoSuchQueue, Status, Uma
from journals import Journal
from tests.conftest import STANDARD_QUEUES
from tests.process.test_links import wait_for_link

MODE = DeliveryMode
WAIT_S = 20.0
QUEUES = STANDARD_QUEUES  # 10 ORDERS (in order), 13 SENDER (out of order)


def saf_seqs(linked, group: int) -> list[int]:
    return [record.seq for _key, record in linked.store(group).scan(Journal.SAF)]


# ---------------------------------------------------------------------- channel rules
async def test_saf_message_refused_for_good_stays_when_the_recoverable_dlq_is_full(
    make_mem_linked,
) -> None:
    """Channel rules (undelivered-messages-channels.txt): a stored message the peer
    refuses for good moves to the sending group's DLQ; if that put fails, it stays in
    the SAF and the link goes into RETRY. With a recoverable DLQ the put is a DQF
    store, which fails when the DQF is full: the SAF record must stay, not vanish."""
    linked = await make_mem_linked(
        queues=QUEUES,
        group_extras={1: "dead_letter_queue_recoverable = true", 2: "dead_letter_queue = false"},
        group_limits={1: "dqf_messages_max = 2"},
    )
    await wait_for_link(linked, 1, 2)
    async with linked.connect(1, "1.13") as sender:
        for index in range(2):  # group 1's DQF is full
            psb = await sender.put(
                b"fill %d" % index, target="1.10", delivery=MODE.WF_DQF, uma=Uma.DISC
            )
            assert psb.delivery_status == Status.STORED
        psb = await sender.put(b"nowhere", target="2.50", delivery=MODE.WF_SAF, uma=Uma.DISC)
        assert (psb.delivery_status, psb.uma_status) == (Status.STORED, Status.NO_UMA)
        # Group 2 has no queue 50 and no DLQ: it answers NO_DQF; group 1's DLQ is full.
        info = await wait_for_link(linked, 1, 2, condition=lambda info: info["drain"] == "retry")
        assert info["saf_backlog"] == 1
        assert saf_seqs(linked, 1) == [psb.seq]
    # Room in the DLQ's journal: the next retry moves it there, with its header.
    async with linked.connect(1, "1.10") as receiver:
        for _ in range(2):
            await receiver.confirm((await receiver.get(timeout=5)).seq)
    await wait_for_link(linked, 1, 2, condition=lambda info: info["saf_backlog"] == 0)
    async with linked.connect(1, "DLQ") as dlq:
        dead = await dlq.get(timeout=5)
        assert (dead.seq, dead.body) == (psb.seq, b"nowhere")
        assert dead.dead_letter_header["reason"] == 2085  # MQRC_UNKNOWN_OBJECT_NAME
        await dlq.confirm(dead.seq)
        try:
            extra = await dlq.get(timeout=0)
        except NoMoreMessages:
            extra = None
        assert extra is None


# ---------------------------------------------------------------------- failed UMAs
async def test_nn_put_whose_uma_fails_is_logged_once_not_lost_silently(
    make_mem_linked, caplog
) -> None:
    """An NN sender is told nothing (UMA_NA), so when its message's UMA fails the
    message is gone with no one the wiser unless the group says so: one ERROR line
    naming the message and the failed UMA, and not one line per put in a flood."""
    linked = await make_mem_linked(
        group_ids=(1,), queues=QUEUES, group_extras={1: "dead_letter_queue = false"}
    )
    caplog.set_level(logging.ERROR, logger="mrs.group")
    async with linked.connect(1, "1.13") as sender:
        seqs = []
        for _ in range(20):  # no queue 50, and no DLQ to take the message
            psb = await sender.put(b"tick", target="1.50", delivery=MODE.NN_MEM, uma=Uma.DLQ)
            assert (psb.delivery_status, psb.uma_status) == (Status.SUCCESS, Status.UMA_NA)
            seqs.append(psb.seq)
        await sender.status()  # every put above was handled before this answer
    lines = [record.getMessage() for record in caplog.records if record.name == "mrs.group"]
    assert lines == [
        f"message {seqs[0]} from 1.13 to 1.50 could not be delivered (NOSUCHQUEUE) and "
        "its UMA DLQ failed: the message is lost"
    ]


async def test_discl_on_an_unwritable_event_log_logs_one_line_per_interval(
    make_mem_linked, caplog
) -> None:
    """DISCL whose event log cannot be written answers DISCL_FAILED; a flood of such
    puts must not write one log line each (the bound on everything)."""
    linked = await make_mem_linked(group_ids=(1,), queues=QUEUES)
    (linked.data_dir(1) / "events.jsonl").mkdir()  # the event log cannot be opened
    caplog.set_level(logging.WARNING, logger="mrs.group")  # the sender is told: a WARNING
    async with linked.connect(1, "1.13") as sender:
        for _ in range(20):
            psb = await sender.put(b"tick", target="1.50", delivery=MODE.WF_MEM, uma=Uma.DISCL)
            assert (psb.delivery_status, psb.uma_status) == (
                Status.NOSUCHQUEUE,
                Status.DISCL_FAILED,
            )
    lines = [record.getMessage() for record in caplog.records if record.name == "mrs.group"]
    assert len(lines) == 2, lines  # why the log failed, and that the UMA failed
    assert lines[0].startswith("cannot write the event log")


# ---------------------------------------------------------------------- DLQ bound
DLQ_MESSAGES_MAX = 10_000
"""Queue 96's messages_max (it is not configurable)."""


async def test_recoverable_dlq_holds_at_most_its_messages_max(make_mem_linked) -> None:
    """A journaled DLQ is bounded like the memory one (DLQ_FAILED once it holds
    messages_max): otherwise one client's dead letters fill the group's whole DQF and
    every other sender's recoverable put is refused DQF_FULL."""
    linked = await make_mem_linked(
        group_ids=(1,),
        queues=QUEUES,
        group_extras={1: "dead_letter_queue_recoverable = true"},
        group_limits={1: f"dqf_messages_max = {DLQ_MESSAGES_MAX + 10}"},
    )

    async def flood(sender, count: int) -> None:
        for _ in range(count):
            psb = await sender.put(b"x", target="1.50", delivery=MODE.WF_MEM, uma=Uma.DLQ)
            assert psb.uma_status == Status.DLQ_SUCCESS

    async with linked.connect(1, "1.13") as sender:
        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(flood, sender, DLQ_MESSAGES_MAX // 10)
        psb = await sender.put(b"one more", target="1.50", delivery=MODE.WF_MEM, uma=Uma.DLQ)
        assert (psb.delivery_status, psb.uma_status) == (Status.NOSUCHQUEUE, Status.DLQ_FAILED)
        # The group's DQF still has room for real traffic.
        psb = await sender.put(b"order", target="1.10", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED


# ---------------------------------------------------------------------- AK notification
@pytest.mark.parametrize("mode", [MODE.AK_MEM, MODE.AK_DQF, MODE.AK_CONF], ids=lambda m: m.name)
async def test_ak_put_to_a_response_queue_that_does_not_exist_is_refused(
    make_mem_linked, mode: DeliveryMode
) -> None:
    """An AK put promises one MRS_ACK on its response queue. A response queue of the
    sender's own group that does not exist could never get it: the put is refused
    NOSUCHQUEUE at once (nothing sent), not accepted and its MRS_ACK dropped."""
    linked = await make_mem_linked(group_ids=(1,), queues=QUEUES)
    async with linked.connect(1, "1.13") as sender, linked.connect(1, "1.10") as receiver:
        with pytest.raises(NoSuchQueue) as refused:
            await sender.put(b"ak", target="1.10", delivery=mode, uma=Uma.DLQ, resp_q="1.77")
        assert refused.value.status == Status.NOSUCHQUEUE
        assert "response queue 1.77" in str(refused.value)
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)  # refused before anything was sent
        # The same put with a response queue that exists is answered by one MRS_ACK.
        psb = await sender.put(b"ak", target="1.10", delivery=mode, uma=Uma.DLQ, resp_q="1.13")
        message = await receiver.get(timeout=5)
        if message.needs_confirm:  # AK_CONF's interest point
            await receiver.confirm(message.seq)
        ack = await sender.get(timeout=5)
        assert ack.is_mrs_ack and ack.ack_psb().seq == psb.seq
        with pytest.raises(MrsTimeout):
            await sender.get(timeout=1)  # one MRS_ACK, no second


async def test_the_event_log_starts_anew_when_full_and_keeps_the_last(
    make_mem_linked, monkeypatch
) -> None:
    """One JSON line per DISCL put, appended for ever: a flood filled the disk the
    journals share. Past EVENT_LOG_BYTES_MAX the log is rolled, the last kept."""
    from mrs.group import umas

    monkeypatch.setattr(umas, "EVENT_LOG_BYTES_MAX", 2_000)
    linked = await make_mem_linked(group_ids=(1,), queues=QUEUES)
    async with linked.connect(1, "1.13") as sender:
        for _ in range(60):
            psb = await sender.put(b"tick", target="1.50", delivery=MODE.WF_MEM, uma=Uma.DISCL)
            assert psb.uma_status == Status.DISCL_SUCCESS
    log_path = linked.data_dir(1) / "events.jsonl"
    kept = log_path.with_name("events.jsonl.1")
    assert kept.stat().st_size >= 2_000 and log_path.stat().st_size < 2_000 + 400
    lines = kept.read_text().splitlines() + log_path.read_text().splitlines()
    assert all(json.loads(line)["event"] == "discarded" for line in lines)
    assert len(lines) < 60  # older ones rolled away: bounded
