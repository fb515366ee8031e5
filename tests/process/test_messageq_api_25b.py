"""The MessageQ calls as a developer porting a MessageQ program makes them, against a
real `mrs serve` over real sockets: pams_attach_q by name, by number and with a value
that is no queue; the blocking client's facts of its attachment (the body limit a
put +1 byte over is refused at, the reconnect count the docs name); pams_get_msg
selecting by the source of a message got before; the PSB of every put of the mode x
UMA matrix, names and numbers as in the reference's table."""

from __future__ import annotations

from typing import Any

import pytest

from clients import (
    Address,
    BadParameter,
    DeliveryMode,
    MessageTooBig,
    NotSupported,
    Status,
    Uma,
    connect,
    connect_sync,
)
from mrs.core.selection import by_source

WAIT_S = 30.0
"""Deadline for what the server process must do (a loaded 2-core CI machine)."""
D = DeliveryMode


@pytest.mark.parametrize("queue", [10.0, b"1.10", True, [10], "", "   "])
async def test_an_attach_to_a_value_that_is_no_queue_is_badparam(bus, queue: Any) -> None:
    """pams_attach_q with a float, bytes, a bool, a list or a blank name: BADPARAM
    naming the argument. Before, its str() was sent: 10.0 was refused NOSUCHQUEUE
    "queue 0 out of range", b"1.10" as group "b'1", True as a queue named 'True'."""
    with pytest.raises(BadParameter) as refused:
        async with connect(bus.address, queue, reconnect=None):
            pass
    assert refused.value.status == Status.BADPARAM
    assert "connect" in str(refused.value)
    with pytest.raises(BadParameter):
        connect_sync(bus.address, queue, reconnect=None)


async def test_an_attach_by_number_by_name_and_by_address_is_the_same_queue(bus) -> None:
    """pams_attach_q takes a queue number: 10, "10", "1.10", "ORDERS", "NYC.ORDERS" and
    Address(1, 10) all attach queue 10 of group 1."""
    queues: tuple[Any, ...] = (10, "10", "1.10", "ORDERS", " ORDERS ", Address(1, 10))
    for queue in queues:
        async with connect(bus.address, queue, reconnect=None) as q:
            assert q.queue == Address(1, 10), queue


def test_the_blocking_client_knows_its_body_limit_and_its_reconnects(bus) -> None:
    """`connect_sync(...)` has the attachment's facts the async client has (the docs
    name `q.connected` and `q.reconnects`): a body of `message_bytes_max` is stored,
    one byte more is MSGTOOBIG, and nothing was dialed again. Before, each of these
    reads raised AttributeError."""
    with connect_sync(bus.address, "SENDER") as sender:
        assert (sender.group_id, sender.group_name) == (1, "NYC")
        size = sender.message_bytes_max
        assert size > 0
        psb = sender.put(b"x" * size, "ANYORDER", delivery=D.WF_DQF)
        assert (psb.status, psb.delivery_status, psb.uma_status) == (
            Status.SUCCESS, Status.STORED, Status.NO_UMA,
        )  # fmt: skip
        with pytest.raises(MessageTooBig) as too_big:
            sender.put(b"x" * (size + 1), "ANYORDER", delivery=D.WF_DQF)
        assert int(too_big.value.status) == int(Status.MSGTOOBIG)
        assert (sender.reconnects, sender.resent_puts, sender.connected) == (0, 0, True)


async def test_a_get_selects_by_the_source_of_a_message_got_before(bus) -> None:
    """`by_source(reply.source)`: a message's source is an Address, and a selection by
    it takes the messages of that sender only. Before, it was refused BADPARAM
    ("source takes a queue address 'G.Q'"), the source of a message got in hand."""
    async with (
        connect(bus.address, "SENDER") as first,
        connect(bus.address, "SENDER2") as second,
        connect(bus.address, "ANYORDER") as q,
    ):
        await first.put(b"from 13 (1)", "ANYORDER", delivery=D.WF_MEM)
        await second.put(b"from 16", "ANYORDER", delivery=D.WF_MEM)
        await first.put(b"from 13 (2)", "ANYORDER", delivery=D.WF_MEM)
        head = await q.get(timeout=WAIT_S, select=by_source("1.16"))
        assert (head.body, head.source) == (b"from 16", Address(1, 16))
        got = await q.get_many(5, timeout=WAIT_S, select=by_source(Address(1, 13)))
        assert [message.body for message in got] == [b"from 13 (1)", b"from 13 (2)"]


# mode -> the PSB (status, delivery status, UMA status) of a put to a queue nobody is
# attached to, UMA DLQ; the reference's numbers beside the names.
_ANSWERED = {
    D.WF_SAF: (1, 31, 25),  # SUCCESS, STORED, NO_UMA
    D.WF_DQF: (1, 31, 25),
    D.WF_MEM: (1, 35, 25),  # UNATTACHEDQ
    **{mode: (1, 1, 27) for mode in D if mode.name.startswith(("AK_", "NN_"))},  # UMA_NA
}


async def test_the_psb_of_every_mode_and_the_pairs_messageq_refuses(bus) -> None:
    """The PSB of each mode, as numbers (MessageQ's UNIX values), and every pair the
    reference does not combine refused NOTSUPPORTED (-268), before anything is stored:
    DLJ or SAF with a nonrecoverable mode, SAF with a SAF mode; no UMA with a
    recoverable mode BADUMA (-222), a mode that is none BADDELIVERY (-60)."""
    async with connect(bus.address, "SENDER") as sender:
        for mode, expected in _ANSWERED.items():
            psb = await sender.put(b"m", "SENDER2", delivery=mode, uma=Uma.DLQ)
            got = (int(psb.status), int(psb.delivery_status), int(psb.uma_status))
            assert (got, psb.type_of_psb, psb.seq > 0) == (expected, 2, True), mode
        refused: list[tuple[Any, Any]] = [
            (mode, uma) for mode in D if not mode.recoverable for uma in (Uma.DLJ, Uma.SAF)
        ]
        refused += [(mode, Uma.SAF) for mode in (D.WF_SAF, D.AK_SAF, D.NN_SAF)]
        refused += [(mode, 0) for mode in D if mode.recoverable]
        refused += [(27, Uma.DISC), (D.WF_DQF, 7)]
        for mode, uma in refused:
            with pytest.raises(NotSupported) as error:
                await sender.put(b"no", "IMPLICIT", delivery=mode, uma=uma)
            wanted = -60 if mode == 27 else -222 if uma in (0, 7) else -268
            assert int(error.value.status) == wanted, (mode, uma)
        assert await sender.pending(["IMPLICIT"]) == [0]  # none was stored
