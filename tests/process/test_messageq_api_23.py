"""The MessageQ API as a developer porting a MessageQ program calls it, against a real
`mrs serve` over real sockets: `pams_get_msg` with a selection of the messages put
without a correlation id, priority order against what a client read ahead, a
temporary queue whose owner left, MRS_ACKs for a queue whose sender left, the
confirm rules of an in-order queue with pams_confirm_msg's force_j and confirm_value,
and the bounds of a put (body, priority, correlation id, timeouts)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from clients import (
    BadParameter,
    BadSequence,
    DeliveryMode,
    ForceJrn,
    MessageTooBig,
    NoMoreMessages,
    QueueBusy,
    Status,
    Uma,
    connect,
    open_journal,
)
from mrs.core.selection import Key, Selection, by_correlation_id, by_priority

WAIT_S = 30.0
"""Deadline for what the server process must do (a loaded 2-core CI machine)."""
D = DeliveryMode


async def test_a_selection_of_no_correlation_id_takes_the_messages_put_without_one(
    bus,
) -> None:
    """`by_correlation_id(b"")` matches every message put without a correlation id
    (Selection.matches says so, and a parked get is woken by one): a get found none
    of those already waiting (the index lookup knows only non-empty ids), so it
    answered NOMOREMSG, or waited out its timeout, beside them."""
    async with connect(bus.address, "SENDER") as sender, connect(bus.address, "ANYORDER") as q:
        for body, priority, cid, msg_class in (
            (b"reply", 0, b"req-1", 7),
            (b"plain 1", 0, b"", 7),
            (b"plain 2", 5, b"", 0),
            (b"plain 3", 0, b"", 0),
        ):
            psb = await sender.put(
                body, "ANYORDER", delivery=D.WF_DQF, priority=priority,
                correlation_id=cid, msg_class=msg_class,
            )  # fmt: skip
            assert psb.delivery_status == Status.STORED
        unkeyed = by_correlation_id(b"")
        first = await q.get(timeout=0, select=unkeyed)
        assert (first.body, first.priority) == (b"plain 2", 5)  # highest priority first
        of_class = Selection(Key("correlation_id", "eq", b""), Key("msg_class", "eq", 7))
        assert (await q.get(timeout=WAIT_S, select=of_class)).body == b"plain 1"
        rest = await q.get_many(5, timeout=0, select=unkeyed)
        assert [message.body for message in rest] == [b"plain 3"]
        with pytest.raises(NoMoreMessages):
            await q.get(timeout=0, select=unkeyed)
        keyed = await q.get(timeout=0)
        assert keyed.correlation_id == b"req-1"
        for message in (first, *rest, keyed):
            await q.confirm(message.seq)


async def test_an_urgent_message_after_a_read_ahead_is_taken_by_a_priority_selection(
    bus,
) -> None:
    """docs/delivery-modes.md#priority-order: memory messages the client read ahead keep
    their place before an urgent one that arrived after them, and a selective get by
    priority takes the urgent one from the group at once."""
    async with connect(bus.address, "SENDER") as sender, connect(bus.address, "ANYORDER") as q:
        for n in range(10):
            await sender.put(b"routine %d" % n, "ANYORDER", delivery=D.WF_MEM)
        assert (await q.get(timeout=WAIT_S)).body == b"routine 0"
        assert len(q.held) == 9  # read ahead
        await sender.put(b"urgent", "ANYORDER", delivery=D.WF_MEM, priority=99)
        assert (await q.get(timeout=WAIT_S)).body == b"routine 1"  # held: its place kept
        urgent = await q.get(timeout=WAIT_S, select=by_priority("ge", 50))
        assert (urgent.body, urgent.priority) == (b"urgent", 99)
        bodies = [message.body for message in await q.get_many(20, timeout=0)]
        assert bodies == [b"routine %d" % n for n in range(2, 10)]


async def test_a_temporary_queue_whose_owner_left(bus) -> None:
    """TEMP (`permanent = false`): a second program's attach is refused QUEUE_BUSY; once
    its owner left a nonrecoverable put answers NOTACTIVE and takes its UMA (RTS: back
    to the sender, MSGUNDEL), a recoverable one is stored; what was queued while it was
    attached waits for the next owner, nothing lost, then the stored one."""
    async with connect(bus.address, "SENDER") as sender:
        async with connect(bus.address, "TEMP"):
            psb = await sender.put(b"while attached", "TEMP", delivery=D.WF_MEM)
            assert psb.delivery_status == Status.ENQUEUED
            with pytest.raises(QueueBusy) as busy:
                async with connect(bus.address, "TEMP", reconnect=None):
                    pass
            assert busy.value.status == Status.QUEUE_BUSY
        for mode, uma, uma_status in (
            (D.WF_MEM, Uma.DISC, Status.DISC_SUCCESS),
            (D.WF_MEM, Uma.RTS, Status.RTS_SUCCESS),
        ):
            psb = await sender.put(b"after", "TEMP", delivery=mode, uma=uma)
            assert (psb.status, psb.delivery_status, psb.uma_status) == (
                Status.SUCCESS, Status.NOTACTIVE, uma_status,
            )  # fmt: skip
        returned = await sender.get(timeout=WAIT_S)
        assert (returned.delivery_status, returned.return_reason) == (
            Status.MSGUNDEL, Status.NOTACTIVE,
        )  # fmt: skip
        stored = await sender.put(b"recoverable", "TEMP", delivery=D.WF_DQF)
        assert stored.delivery_status == Status.STORED
    async with connect(bus.address, "TEMP") as owner:
        got = [await owner.get(timeout=WAIT_S), await owner.get(timeout=WAIT_S)]
        assert [message.body for message in got] == [b"while attached", b"recoverable"]
        await owner.confirm(got[1].seq)
        with pytest.raises(NoMoreMessages):
            await owner.get(timeout=0)


async def test_mrs_acks_wait_for_the_next_program_on_a_queue_its_sender_left(bus) -> None:
    """An AK sender that detaches before its interest points are reached loses none of
    its MRS_ACKs: each waits on its response queue for the next program attached to
    it, carrying the PSB a WF put of that mode returns (docs/delivery-modes.md)."""
    expected: dict[int, tuple[Status | int, Status | int]] = {}
    async with connect(bus.address, "ANYORDER") as receiver:
        async with connect(bus.address, "SENDER") as sender:
            for mode, reached in (
                (D.AK_DQF, Status.STORED), (D.AK_MEM, Status.ENQUEUED),
                (D.AK_DEQ, Status.SUCCESS), (D.AK_CONF, Status.SUCCESS),
                (D.AK_ACK, Status.SUCCESS),
            ):  # fmt: skip
                psb = await sender.put(mode.name.encode(), "ANYORDER", delivery=mode)
                assert (psb.status, psb.delivery_status, psb.uma_status) == (
                    Status.SUCCESS, Status.SUCCESS, Status.UMA_NA,
                )  # fmt: skip
                expected[psb.seq] = (reached, Status.NO_UMA)
        for message in await receiver.get_many(10, timeout=WAIT_S):
            if message.needs_confirm:
                await receiver.confirm(message.seq)
    async with connect(bus.address, "SENDER") as successor:
        acks: dict[int, tuple[Status | int, Status | int]] = {}
        while len(acks) < len(expected):
            ack = (await successor.get(timeout=WAIT_S)).ack_psb()
            acks[ack.seq] = (ack.delivery_status, ack.uma_status)
        assert acks == expected
        with pytest.raises(NoMoreMessages):
            await successor.get(timeout=0)


async def test_confirm_order_force_j_and_confirm_value_on_an_in_order_queue(bus) -> None:
    """pams_confirm_msg on ORDERS (explicit-in-order, pcj_default true): a confirm out
    of order is BADSEQ naming the one due, and confirms nothing; FORCE_JRN keeps its
    (negative) confirm_value in the PCJ, NO_JRN writes no record, DEFAULT_JRN follows
    the group; a second confirm is BADSEQ; a force_j that is none is BADPARAM."""
    async with connect(bus.address, "SENDER") as sender, connect(bus.address, "ORDERS") as q:
        for n in range(3):
            await sender.put(b"order %d" % n, "ORDERS", delivery=D.WF_DQF)
        first, second, third = [await q.get(timeout=WAIT_S) for _ in range(3)]
        with pytest.raises(BadSequence) as early:
            await q.confirm(second.seq, confirm_value=5, force_j=ForceJrn.FORCE_JRN)
        assert f"confirm {first.seq} before {second.seq}" in str(early.value)
        with pytest.raises(BadParameter):
            await q.confirm(first.seq, force_j=3)  # type: ignore[arg-type]
        await q.confirm(first.seq, confirm_value=-7, force_j=ForceJrn.FORCE_JRN)
        await q.confirm(second.seq, confirm_value=9, force_j=ForceJrn.NO_JRN)
        await q.confirm(third.seq, confirm_value=2**63 - 1)
        with pytest.raises(BadSequence):
            await q.confirm(third.seq)
    with open_journal(bus.data_dir, "pcj") as pcj:
        records = {record.seq: record.confirm_value for record in pcj}
    assert records == {first.seq: -7, third.seq: 2**63 - 1}


async def test_the_bounds_of_a_put(bus) -> None:
    """A body of exactly message_bytes_max is stored and one byte more is MSGTOOBIG; an
    empty body travels; priority 0..99, a correlation id of 32 bytes, a class of
    int64 and a timeout of 1e300 s are taken, one step past each is BADPARAM."""
    async with connect(bus.address, "SENDER") as sender, connect(bus.address, "ANYORDER") as q:
        size = sender.message_bytes_max
        assert (await sender.put(b"x" * size, "ANYORDER")).delivery_status == Status.STORED
        with pytest.raises(MessageTooBig):
            await sender.put(b"x" * (size + 1), "ANYORDER")
        edges: dict[str, Any] = dict(
            priority=99, correlation_id=b"c" * 32, msg_class=-(2**63), timeout=1e300
        )
        assert (await sender.put(b"", "ANYORDER", **edges)).delivery_status == Status.STORED
        pasts: tuple[dict[str, Any], ...] = (
            {"priority": 100}, {"priority": -1}, {"correlation_id": b"c" * 33},
            {"msg_class": 2**63}, {"timeout": -1}, {"timeout": float("nan")},
        )  # fmt: skip
        for past in pasts:
            with pytest.raises(BadParameter):
                await sender.put(b"past", "ANYORDER", **past)
        edge = await q.get(timeout=WAIT_S)  # the priority 99 one first
        assert (edge.body, edge.correlation_id, edge.msg_class) == (b"", b"c" * 32, -(2**63))
        whole = await q.get(timeout=1e300)
        assert len(whole.body) == size
        await q.confirm(edge.seq)
        await q.confirm(whole.seq)
        with pytest.raises(BadParameter):
            await q.get(timeout=-1)
        with trio.fail_after(WAIT_S):
            with pytest.raises(NoMoreMessages):
                await q.get(timeout=0)


async def test_confirm_many_records_each_confirm_value(bus) -> None:
    """pams_confirm_msg takes a confirm value, kept in the PCJ; `confirm_many` always
    recorded 0, so a ported program that confirms in batches could not keep its
    values. Now `confirm_values` gives one per seq (in order, in-turn too); a count
    that does not match the seqs is BADPARAM before anything is confirmed."""
    values = [-7, 0, 2**63 - 1]
    async with connect(bus.address, "SENDER") as sender, connect(bus.address, "ANYORDER") as q:
        for n in range(3):
            await sender.put(b"order %d" % n, "ANYORDER", delivery=D.WF_DQF)
        seqs = [(await q.get(timeout=WAIT_S)).seq for _ in range(3)]
        with pytest.raises(BadParameter, match="2 confirm_values for 3 seqs"):
            await q.confirm_many(seqs, confirm_values=values[:2])
        assert await q.confirm_many(seqs, confirm_values=values) == [None, None, None]
    with open_journal(bus.data_dir, "pcj") as pcj:
        records = {record.seq: record.confirm_value for record in pcj}
    assert records == dict(zip(seqs, values, strict=True))


def test_the_blocking_confirm_many_takes_confirm_values_too(bus) -> None:
    """The blocking client's `confirm_many` passes `confirm_values` on."""
    from clients import connect_sync

    with connect_sync(bus.address, "SENDER") as sender, connect_sync(bus.address, "ANYORDER") as q:
        sender.put(b"one", "ANYORDER", delivery=D.WF_DQF)
        seq = q.get(timeout=WAIT_S).seq
        assert q.confirm_many([seq], confirm_values=[42]) == [None]
    with open_journal(bus.data_dir, "pcj") as pcj:
        assert {record.seq: record.confirm_value for record in pcj} == {seq: 42}
