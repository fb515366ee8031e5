"""Confirmation styles, POSSDUPL, the PCJ, timeouts and restarts.

The rules run on the in-process bus under MockClock (`mem_bus`: the real group server,
its restart keeps what a SIGKILL keeps); a restart by SIGTERM and by SIGKILL and the
blocking client stay on a real `mrs serve` process (`bus`)."""

from __future__ import annotations

import pytest

from clients import (
    BadParameter,
    BadSequence,
    DeliveryMode,
    ForceJrn,
    MrsTimeout,
    NoMoreMessages,
    QueueBusy,
    Status,
    TooManyUnconfirmed,
    Uma,
    connect_sync,
)
from journals import Journal

MODE = DeliveryMode


async def _send(bus, target: str, bodies: list[bytes], mode=MODE.WF_DQF) -> list[int]:
    async with bus.connect(queue="SENDER") as sender:
        seqs = []
        for body in bodies:
            psb = await sender.put(body, target=target, delivery=mode, uma=Uma.DISC)
            assert psb.delivery_status == Status.STORED
            seqs.append(psb.seq)
        return seqs


def _pcj(bus) -> dict:
    """The in-process group's PCJ (mem_bus: its journal store), by seq."""
    return {record.seq: record for _, record in bus.store.scan(Journal.PCJ)}


async def test_in_order_queue_refuses_out_of_order_confirm(mem_bus) -> None:
    bus = mem_bus
    seqs = await _send(bus, "ORDERS", [b"a", b"b", b"c"])
    async with bus.connect(queue="ORDERS") as receiver:
        messages = [await receiver.get(timeout=5) for _ in seqs]
        assert [m.seq for m in messages] == seqs
        with pytest.raises(BadSequence, match=f"confirm {seqs[0]} before {seqs[1]}"):
            await receiver.confirm(seqs[1])
        for seq in seqs:
            await receiver.confirm(seq)
        with pytest.raises(BadSequence, match="not awaiting a confirm here .confirmed already"):
            await receiver.confirm(seqs[0])


async def test_out_of_order_queue_accepts_any_order(mem_bus) -> None:
    bus = mem_bus
    seqs = await _send(bus, "ANYORDER", [b"a", b"b", b"c"])
    async with bus.connect(queue="ANYORDER") as receiver:
        for _ in seqs:
            await receiver.get(timeout=5)
        for seq in reversed(seqs):
            await receiver.confirm(seq)
    async with bus.connect(queue="ANYORDER") as receiver:
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)


async def test_implicit_queue_confirms_the_previous_message_on_the_next_get(mem_bus) -> None:
    bus = mem_bus
    seqs = await _send(bus, "IMPLICIT", [b"a", b"b"])
    async with bus.connect(queue="IMPLICIT") as receiver:
        first = await receiver.get(timeout=5)
        second = await receiver.get(timeout=5)  # confirms `first`
        assert (first.seq, second.seq) == tuple(seqs)
    # `second` was never followed by a get: it comes back, marked POSSDUPL.
    async with bus.connect(queue="IMPLICIT") as receiver:
        again = await receiver.get(timeout=5)
        assert (again.seq, again.delivery_status) == (seqs[1], Status.POSSDUPL)
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)


async def test_unconfirmed_cap_answers_excmaxunconf(mem_bus) -> None:
    bus = mem_bus
    async with bus.connect(queue="SENDER") as sender:
        for body in (b"1", b"2", b"3"):
            await sender.put(body, target="SMALL", delivery=MODE.WF_DQF, uma=Uma.DISC)
    async with bus.connect(queue="SMALL") as receiver:
        first = await receiver.get(timeout=5)
        await receiver.get(timeout=5)
        with pytest.raises(TooManyUnconfirmed):
            await receiver.get(timeout=5)
        await receiver.confirm(first.seq)
        third = await receiver.get(timeout=5)
    assert third.body == b"3"


async def test_possdupl_after_reattach_and_confirmreq_only_first_time(mem_bus) -> None:
    bus = mem_bus
    seqs = await _send(bus, "ORDERS", [b"a", b"b"])
    async with bus.connect(queue="ORDERS") as receiver:
        first = await receiver.get(timeout=5)
        assert first.delivery_status == Status.CONFIRMREQ
    async with bus.connect(queue="ORDERS") as receiver:
        again = await receiver.get(timeout=5)
        fresh = await receiver.get(timeout=5)
    assert (again.seq, again.delivery_status) == (seqs[0], Status.POSSDUPL)
    assert (fresh.seq, fresh.delivery_status) == (seqs[1], Status.CONFIRMREQ)


@pytest.mark.parametrize("graceful", [True, False], ids=["sigterm", "sigkill"])
async def test_restart_recovers_unconfirmed_and_marks_exactly_the_delivered(bus, graceful) -> None:
    seqs = await _send(bus, "ORDERS", [b"a", b"b", b"c"])
    async with bus.connect(queue="ORDERS") as receiver:
        first = await receiver.get(timeout=5)
        await receiver.confirm(first.seq)
        delivered = await receiver.get(timeout=5)
        assert delivered.delivery_status == Status.CONFIRMREQ
    bus.restart(graceful=graceful)
    async with bus.connect(queue="ORDERS") as receiver:
        again = await receiver.get(timeout=5)
        never = await receiver.get(timeout=5)
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)
    assert (again.seq, again.body, again.delivery_status) == (seqs[1], b"b", Status.POSSDUPL)
    assert (never.seq, never.body, never.delivery_status) == (seqs[2], b"c", Status.CONFIRMREQ)


async def test_seqs_keep_increasing_across_restarts(mem_bus) -> None:
    bus = mem_bus
    before = await _send(bus, "ANYORDER", [b"a"])
    await bus.restart()
    after = await _send(bus, "ANYORDER", [b"b"])
    assert after[0] > before[0]


@pytest.mark.parametrize(
    "force_j, journaled",
    [(ForceJrn.FORCE_JRN, True), (ForceJrn.NO_JRN, False), (ForceJrn.DEFAULT_JRN, True)],
)
async def test_confirm_writes_the_pcj_as_force_j_says(mem_bus, force_j, journaled) -> None:
    bus = mem_bus
    """The bus fixture's group has pcj_default = true."""
    [seq] = await _send(bus, "ANYORDER", [b"audited"])
    async with bus.connect(queue="ANYORDER") as receiver:
        message = await receiver.get(timeout=5)
        await receiver.confirm(message.seq, confirm_value=4242, force_j=force_j)
    pcj = _pcj(bus)
    assert (seq in pcj) == journaled
    if journaled:
        record = pcj[seq]
        assert (record.body, record.confirm_value) == (b"audited", 4242)
        assert record.confirm_time_ns >= record.put_time_ns > 0
        assert (record.target_group, record.target_queue) == (1, 11)
        assert (record.source_group, record.source_queue) == (1, 13)


async def test_default_jrn_without_pcj_default_does_not_journal(make_mem_bus) -> None:
    bus = await make_mem_bus()
    [seq] = await _send(bus, "ANYORDER", [b"x"])
    async with bus.connect(queue="ANYORDER") as receiver:
        await receiver.confirm((await receiver.get(timeout=5)).seq)
    assert seq not in _pcj(bus)


async def test_get_and_put_timeouts(mem_bus) -> None:
    bus = mem_bus
    async with bus.connect(queue="SENDER") as sender:
        with pytest.raises(MrsTimeout) as get_timeout:
            await sender.get(timeout=0.2)
        assert get_timeout.value.status == Status.TIMEOUT
        with pytest.raises(NoMoreMessages):
            await sender.get(timeout=0)
        with pytest.raises(MrsTimeout, match="may or may not have been stored"):
            await sender.put(
                b"nobody gets this", target="ANYORDER", delivery=MODE.WF_DEQ, timeout=0.2
            )


async def test_confirm_with_bad_force_j_is_refused(mem_bus) -> None:
    bus = mem_bus
    await _send(bus, "ANYORDER", [b"x"])
    async with bus.connect(queue="ANYORDER") as receiver:
        message = await receiver.get(timeout=5)
        with pytest.raises(BadParameter) as refused:
            await receiver.confirm(message.seq, force_j=7)
        assert refused.value.status == Status.BADPARAM
        await receiver.confirm(message.seq)


async def test_queue_can_be_attached_once(mem_bus) -> None:
    bus = mem_bus
    async with bus.connect(queue="ORDERS"):
        with pytest.raises(QueueBusy) as busy:
            async with bus.connect(queue="ORDERS"):
                pass
        assert busy.value.status == Status.QUEUE_BUSY


async def test_async_iteration_and_message_confirm(mem_bus) -> None:
    bus = mem_bus
    seqs = await _send(bus, "ANYORDER", [b"1", b"2", b"3"])
    received = []
    async with bus.connect(queue="ANYORDER") as receiver:
        async for message in receiver:
            await message.confirm()
            received.append(message.seq)
            if len(received) == len(seqs):
                break
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)
    assert received == seqs


def test_sync_client_put_get_confirm(bus) -> None:
    with (
        connect_sync(bus.address, queue="SENDER") as sender,
        connect_sync(bus.address, queue="ANYORDER") as receiver,
    ):
        psb = sender.put(b"blocking", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
        message = receiver.get(timeout=5)
        assert message.body == b"blocking"
        receiver.confirm(message.seq)
        with pytest.raises(NoMoreMessages):
            receiver.get(timeout=0)


async def test_long_backlog_keeps_bodies_on_disk_and_delivers_them(make_mem_bus) -> None:
    """Beyond BODIES_IN_MEMORY_PER_QUEUE_MAX per queue, bodies are read back from the
    DQF at delivery: every one must still arrive intact, live and after a restart."""
    from mrs.group import BODIES_IN_MEMORY_PER_QUEUE_MAX

    backlog = await make_mem_bus(limits="dqf_messages_max = 10000")
    count = BODIES_IN_MEMORY_PER_QUEUE_MAX + 300
    for restart in (False, True):
        bodies = [
            b"%s-%05d-" % (b"%d" % restart, index) + bytes([index % 251]) * 100
            for index in range(count)
        ]
        await _put_concurrently(backlog, bodies)
        if restart:
            await backlog.restart()
        async with backlog.connect(queue="ANYORDER") as receiver:
            received = []
            while True:
                try:
                    message = await receiver.get(timeout=0)
                except NoMoreMessages:
                    break
                received.append(message.body)
                await receiver.confirm(message.seq)
        assert sorted(received) == sorted(bodies)


async def _put_concurrently(bus, bodies: list[bytes], tasks: int = 16) -> None:
    import trio

    async with bus.connect(queue="SENDER") as sender:

        async def put_every(start: int) -> None:
            for body in bodies[start::tasks]:
                psb = await sender.put(body, target="ANYORDER", delivery=MODE.WF_DQF, uma=Uma.DISC)
                assert psb.delivery_status == Status.STORED

        async with trio.open_nursery() as nursery:
            for start in range(tasks):
                nursery.start_soon(put_every, start)


async def test_headers_travel_with_the_message_through_a_restart(mem_bus) -> None:
    bus = mem_bus
    headers = {"replay": {"journal": "pcj", "group": 1, "seq": 77, "source": "1.13"}}
    async with bus.connect(queue="SENDER") as sender:
        await sender.put(
            b"h",
            target="ANYORDER",
            delivery=MODE.WF_DQF,
            uma=Uma.DISC,
            headers=headers,
            correlation_id=b"c-1",
            msg_class=5,
            msg_type=-3,
            priority=9,
        )
    await bus.restart()
    async with bus.connect(queue="ANYORDER") as receiver:
        message = await receiver.get(timeout=5)
        await receiver.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
    assert message.headers == headers
    assert (message.correlation_id, message.msg_class, message.msg_type, message.priority) == (
        b"c-1",
        5,
        -3,
        9,
    )
    assert _pcj(bus)[message.seq].extra["headers"] == headers


async def test_idempotency_key_stores_a_message_once(mem_bus) -> None:
    bus = mem_bus
    import trio

    key = {"idempotency_key": "replay:pcj:1:42"}
    async with bus.connect(queue="SENDER") as sender:
        first = await sender.put(
            b"once", target="ANYORDER", delivery=MODE.WF_DQF, uma=Uma.DISC, headers=key
        )
        again = await sender.put(
            b"once", target="ANYORDER", delivery=MODE.WF_DQF, uma=Uma.DISC, headers=key
        )
        assert first.delivery_status == again.delivery_status == Status.STORED
        assert again.seq == first.seq
        both: list = []
        other = {"idempotency_key": "in-flight-twice"}
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(lambda: _append_put(sender, other, both))
        assert both[0].seq == both[1].seq
        with pytest.raises(BadParameter) as refused:
            await sender.put(
                b"x",
                target="ANYORDER",
                delivery=MODE.WF_DQF,
                uma=Uma.DISC,
                headers={"idempotency_key": 5},
            )
        assert refused.value.status == Status.BADPARAM
    await bus.restart()
    async with bus.connect(queue="SENDER") as sender:
        after_restart = await sender.put(
            b"once", target="ANYORDER", delivery=MODE.WF_DQF, uma=Uma.DISC, headers=key
        )
        assert after_restart.seq == first.seq
    async with bus.connect(queue="ANYORDER") as receiver:
        bodies = []
        while True:
            try:
                bodies.append((await receiver.get(timeout=0)).body)
            except NoMoreMessages:
                break
    assert sorted(bodies) == [b"once", b"twice"]


async def _append_put(sender, headers: dict, results: list) -> None:
    results.append(
        await sender.put(
            b"twice", target="ANYORDER", delivery=MODE.WF_DQF, uma=Uma.DISC, headers=headers
        )
    )
