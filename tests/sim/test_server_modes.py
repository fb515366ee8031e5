"""Every delivery mode to a target in the same group, against the real server code (in process)."""

from __future__ import annotations

import pytest
import trio

from clients import (
    DeliveryMode,
    MessageTooBig,
    NoMoreMessages,
    NoSuchQueue,
    NotSupported,
    Status,
    Uma,
)

MODE = DeliveryMode


async def test_wf_mem_reports_enqueued_and_unattachedq(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"to nobody", target="1.11", delivery=MODE.WF_MEM)
        assert (psb.status, psb.delivery_status) == (Status.SUCCESS, Status.UNATTACHEDQ)
        async with mem_bus.connect(queue="ANYORDER") as receiver:
            psb = await sender.put(b"to someone", target="1.11", delivery=MODE.WF_MEM)
            assert psb.delivery_status == Status.ENQUEUED
            first = await receiver.get(timeout=5)
            second = await receiver.get(timeout=5)
    assert [first.body, second.body] == [b"to nobody", b"to someone"]
    assert first.delivery_status == Status.SUCCESS and not first.needs_confirm
    assert str(first.source) == "1.13" and str(first.target) == "1.11"


async def test_ak_mem_sends_mrs_ack_and_nn_mem_sends_nothing(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"x", target="ANYORDER", delivery=MODE.AK_MEM)
        assert psb.status == Status.SUCCESS
        ack = await sender.get(timeout=5)
        assert ack.is_mrs_ack and (ack.msg_class, ack.msg_type) == (28, -801)
        ack_psb = ack.ack_psb()
        assert ack_psb.seq == psb.seq and ack_psb.delivery_status == Status.UNATTACHEDQ
        await sender.put(b"y", target="ANYORDER", delivery=MODE.NN_MEM)
        with pytest.raises(NoMoreMessages):
            await sender.get(timeout=0)


async def _put_in_background(nursery, sender, results: list, **options) -> trio.Event:
    done = trio.Event()

    async def put() -> None:
        results.append(await sender.put(b"waiting", **options))
        done.set()

    nursery.start_soon(put)
    return done


async def test_wf_deq_blocks_until_the_receiver_gets(mem_bus) -> None:
    results: list = []
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="ANYORDER") as receiver,
        trio.open_nursery() as nursery,
    ):
        done = await _put_in_background(
            nursery, sender, results, target="1.11", delivery=MODE.WF_DEQ
        )
        # The put cannot complete before the get: prove the message is waiting first.
        status = await sender.status()
        while status["queues"]["1.11"]["pending"] == 0:
            await trio.lowlevel.checkpoint()
            status = await sender.status()
        assert not done.is_set()
        message = await receiver.get(timeout=5)
        await done.wait()
    assert message.body == b"waiting"
    assert results[0].delivery_status == Status.SUCCESS


async def test_wf_ack_blocks_until_the_receiver_confirms(mem_bus) -> None:
    results: list = []
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="ANYORDER") as receiver,
        trio.open_nursery() as nursery,
    ):
        done = await _put_in_background(
            nursery, sender, results, target="1.11", delivery=MODE.WF_ACK
        )
        message = await receiver.get(timeout=5)
        assert message.delivery_status == Status.CONFIRMREQ
        assert not done.is_set()
        await message.confirm()
        await done.wait()
    assert results[0].delivery_status == Status.SUCCESS
    assert results[0].seq == message.seq


@pytest.mark.parametrize("mode, interest", [(MODE.AK_DEQ, "get"), (MODE.AK_ACK, "confirm")])
async def test_ak_deq_and_ak_ack_acknowledge_at_their_interest_point(
    mem_bus, mode, interest
) -> None:
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="ANYORDER") as receiver,
    ):
        psb = await sender.put(b"m", target="1.11", delivery=mode)
        with pytest.raises(NoMoreMessages):
            await sender.get(timeout=0)
        message = await receiver.get(timeout=5)
        if interest == "confirm":
            with pytest.raises(NoMoreMessages):
                await sender.get(timeout=0)
            await receiver.confirm(message.seq)
        ack = await sender.get(timeout=5)
    assert ack.is_mrs_ack
    assert ack.ack_psb().seq == psb.seq and ack.ack_psb().delivery_status == Status.SUCCESS


@pytest.mark.parametrize("mode", [MODE.WF_SAF, MODE.WF_DQF])
async def test_wf_recoverable_reports_stored_and_delivers_confirmreq(mem_bus, mode) -> None:
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="ANYORDER") as receiver,
    ):
        psb = await sender.put(b"durable", target="1.11", delivery=mode, uma=Uma.DISC)
        assert (psb.status, psb.delivery_status, psb.uma_status) == (
            Status.SUCCESS,
            Status.STORED,
            Status.NO_UMA,
        )
        message = await receiver.get(timeout=5)
        assert (message.seq, message.delivery_status) == (psb.seq, Status.CONFIRMREQ)
        await receiver.confirm(message.seq)


@pytest.mark.parametrize("mode", [MODE.AK_SAF, MODE.AK_DQF, MODE.NN_SAF, MODE.NN_DQF])
async def test_ak_and_nn_recoverable(mem_bus, mode) -> None:
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="ANYORDER") as receiver,
    ):
        psb = await sender.put(b"durable", target="1.11", delivery=mode, uma=Uma.DISC)
        message = await receiver.get(timeout=5)
        assert message.seq == psb.seq and message.delivery_status == Status.CONFIRMREQ
        if mode.notification == "AK":
            ack = await sender.get(timeout=5)
            assert ack.ack_psb().delivery_status == Status.STORED
        else:
            with pytest.raises(NoMoreMessages):
                await sender.get(timeout=0)


async def test_wf_conf_waits_for_confirm_and_ak_conf_acks_after_it(mem_bus) -> None:
    results: list = []
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="ANYORDER") as receiver,
        trio.open_nursery() as nursery,
    ):
        done = await _put_in_background(
            nursery, sender, results, target="1.11", delivery=MODE.WF_CONF, uma=Uma.DISC
        )
        message = await receiver.get(timeout=5)
        assert not done.is_set()
        await receiver.confirm(message.seq)
        await done.wait()
        assert results[0].delivery_status == Status.SUCCESS

        psb = await sender.put(b"ak", target="1.11", delivery=MODE.AK_CONF, uma=Uma.DISC)
        message = await receiver.get(timeout=5)
        with pytest.raises(NoMoreMessages):
            await sender.get(timeout=0)
        await receiver.confirm(message.seq)
        ack = await sender.get(timeout=5)
        assert ack.ack_psb().seq == psb.seq


@pytest.mark.parametrize(
    "mode, uma",
    [
        (MODE.WF_SAF, Uma.SAF),
        (MODE.AK_SAF, Uma.SAF),
        (MODE.NN_SAF, Uma.SAF),
        (MODE.WF_MEM, Uma.DLJ),
        (MODE.WF_MEM, Uma.SAF),
        (MODE.AK_DEQ, Uma.DLJ),
    ],
)
async def test_unsupported_mode_uma_pairs_answer_notsupported(mem_bus, mode, uma) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        with pytest.raises(NotSupported) as refused:
            await sender.put(b"x", target="1.11", delivery=mode, uma=uma)
        assert refused.value.status == Status.NOTSUPPORTED
        assert uma.name in refused.value.message


async def test_values_that_are_no_mode_or_uma(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        with pytest.raises(NotSupported) as refused:
            await sender._requests.request(
                __import__("mrs.protocol", fromlist=["Put"]).Put(
                    99, "1.11", b"", 27, 0, 0, 0, 0, 0, b"", ""
                ),
                5,
            )
        assert refused.value.status == Status.BADDELIVERY


async def test_unknown_targets(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        recoverable = await sender.put(b"x", target="1.77", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert recoverable.delivery_status == Status.NO_DQF
        assert recoverable.uma_status == Status.DISC_SUCCESS
        memory = await sender.put(b"x", target="1.77", delivery=MODE.WF_MEM)
        assert memory.delivery_status == Status.NOSUCHQUEUE
        assert memory.uma_status == Status.DISC_SUCCESS
        with pytest.raises(NoSuchQueue, match="no group 9"):
            await sender.put(b"x", target="9.10", delivery=MODE.WF_MEM)
        with pytest.raises(NoSuchQueue, match="NOPE"):
            await sender.put(b"x", target="NOPE", delivery=MODE.WF_MEM)


async def test_queue_over_quota_answers_exceedquota(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        for _ in range(2):
            psb = await sender.put(b"x", target="SMALL", delivery=MODE.WF_MEM)
            assert psb.delivery_status == Status.UNATTACHEDQ
        psb = await sender.put(b"x", target="SMALL", delivery=MODE.WF_MEM)
        assert (psb.delivery_status, psb.uma_status) == (Status.EXCEEDQUOTA, Status.DISC_SUCCESS)


async def test_temporary_queue_not_attached_answers_notactive(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"x", target="TEMP", delivery=MODE.WF_MEM)
        assert (psb.delivery_status, psb.uma_status) == (Status.NOTACTIVE, Status.DISC_SUCCESS)


async def test_dqf_full_takes_the_uma(mem_bus) -> None:
    """The mem_bus fixture's group holds dqf_messages_max = 40."""
    async with mem_bus.connect(queue="SENDER") as sender:
        for index in range(40):
            psb = await sender.put(b"%d" % index, target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
            assert psb.delivery_status == Status.STORED
        psb = await sender.put(b"one too many", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DLJ)
        assert (psb.delivery_status, psb.uma_status) == (Status.DQF_FULL, Status.DLJ_SUCCESS)
        async with mem_bus.connect(queue="ANYORDER") as receiver:
            message = await receiver.get(timeout=5)
            await receiver.confirm(message.seq)
        psb = await sender.put(b"room again", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED


async def test_message_bigger_than_the_limit_is_refused(make_mem_bus) -> None:
    mem_bus = await make_mem_bus(limits="message_bytes_max = 1000")
    async with mem_bus.connect(queue="SENDER") as sender:
        with pytest.raises(MessageTooBig) as refused:
            await sender.put(b"x" * 1001, target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert refused.value.status == Status.MSGTOOBIG
        # Far over the frame limit too: refused by the client, the connection lives on.
        with pytest.raises(MessageTooBig) as refused:
            await sender.put(b"x" * 100_000, target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert refused.value.status == Status.MSGTOOBIG
        psb = await sender.put(b"x" * 1000, target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED


async def test_recoverable_put_to_a_queue_without_dqf_answers_no_dqf(make_mem_bus) -> None:
    queues = (
        '[[group.queue]]\nid = 13\nname = "SENDER"\n'
        '[[group.queue]]\nid = 30\nname = "NODQF"\nrecoverable = false\n'
    )
    mem_bus = await make_mem_bus(queues=queues)
    async with mem_bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"x", target="NODQF", delivery=MODE.WF_DQF, uma=Uma.DLJ)
        assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.DLJ_SUCCESS)
        memory = await sender.put(b"y", target="NODQF", delivery=MODE.WF_MEM)
        assert memory.delivery_status == Status.UNATTACHEDQ
