"""Probes of the client API against MessageQ's semantics (pams_get_msg with a
selection, pams_locate_q, putil_show_pending, attach, timeouts), on the in-process
bus (`mem_bus`: the real GroupServer, its journals and network in memory)."""

from __future__ import annotations

import pytest

from clients import BadParameter, DeliveryMode, NoMoreMessages, Status, Uma
from mrs.core.selection import by_class_type, by_source


async def test_a_selective_get_finds_a_message_the_client_read_ahead(mem_bus) -> None:
    """A selective get must see every message its queue holds for it: the MRS_ACKs
    and NN messages a plain get read ahead are held by the client, not the group, and
    a get selecting one of them answered NOMOREMSG while the client held it."""
    async with mem_bus.connect("SENDER") as sender:
        for number in range(3):
            await sender.put(
                b"ak%d" % number, target="ANYORDER", delivery=DeliveryMode.AK_MEM, uma=Uma.DISC
            )
        await sender.put(
            b"note", target="SENDER", delivery=DeliveryMode.NN_MEM, uma=Uma.DISC, msg_class=7
        )
        first = await sender.get(timeout=5)  # the pool's batch reads the rest ahead
        assert (first.msg_class, first.msg_type) == (28, -801)
        assert len(sender.held) == 3  # two MRS_ACKs and the note, lent to this client

        note = await sender.get(timeout=0, select=by_class_type(7))
        assert (note.body, note.msg_class) == (b"note", 7)
        acks = await sender.get_many(5, timeout=0, select=by_source("1.0"))
        assert [(ack.msg_class, ack.msg_type) for ack in acks] == [(28, -801)] * 2
        assert acks[0].seq < acks[1].seq  # in the order the queue handed them out
        assert sender.held == ()
        try:
            await sender.get(timeout=0, select=by_class_type(7))
            raise AssertionError("the note was delivered twice")
        except NoMoreMessages:
            pass


@pytest.mark.parametrize("count_max", [5000, 0])
async def test_a_refused_selective_get_many_leaves_the_client_able_to_get(
    mem_bus, count_max: int
) -> None:
    """A bad count is the caller's BADPARAM and nothing else: it reserved room for
    held messages before the count was checked and never freed it, so one
    get_many(5000, select=...) made every later get of the client EXCEEDQUOTA."""
    async with mem_bus.connect("SENDER") as sender:
        await sender.put(b"wanted", target="ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
    async with mem_bus.connect("ANYORDER") as receiver:
        with pytest.raises(BadParameter) as refused:
            await receiver.get_many(count_max, timeout=0, select=by_source("1.13"))
        assert refused.value.status is Status.BADPARAM
        assert f"got {count_max}" in refused.value.message  # the caller's own number
        got = await receiver.get(timeout=0, select=by_source("1.13"))
        assert (got.body, got.delivery_status) == (b"wanted", Status.CONFIRMREQ)
        await receiver.confirm(got.seq)


@pytest.mark.parametrize("count_max", [0, -1])
async def test_get_many_refuses_a_bad_count_also_while_messages_are_held(
    mem_bus, count_max: int
) -> None:
    """With messages held from a read-ahead, get_many served them before it looked
    at the count: 0 and -1 answered [] instead of BADPARAM, as they do otherwise."""
    async with mem_bus.connect("SENDER") as sender:
        for number in range(3):
            await sender.put(
                b"ak%d" % number, target="ANYORDER", delivery=DeliveryMode.AK_MEM, uma=Uma.DISC
            )
        await sender.get(timeout=5)  # the pool's batch reads the other MRS_ACKs ahead
        assert len(sender.held) == 2
        with pytest.raises(BadParameter, match=f"got {count_max}"):
            await sender.get_many(count_max, timeout=0)
        assert len(await sender.get_many(5, timeout=0)) == 2  # still held, in order


@pytest.mark.parametrize("source", ["01.13", "1.013", "SENDER.13", "1.x", "1.13.2", " 1.13"])
def test_a_source_selection_a_message_could_never_match_is_refused(source: str) -> None:
    """A message's source is `G.Q` in plain numbers: "01.13" passed the check and
    then matched nothing, so the get waited its whole timeout for a message that was
    there. It is refused at once, with the form to write."""
    with pytest.raises(BadParameter, match="source takes a queue address 'G.Q' in numbers"):
        by_source(source)
    assert by_source("1.13").matches(type("Sent", (), {"source": "1.13"})())
