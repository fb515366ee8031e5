"""A program ported from MessageQ, run against a real `mrs serve`: the confirm calls it
makes (pams_confirm_msg with each force_j, twice, on a seq it does not hold, on a
message that needs no confirm) and an implicit queue's exit with a message read and
not confirmed after a selective get passed another over. Each answer is the one the
reference tables give (BADSEQ: "journal sequence number is not known to the MRS")."""

from __future__ import annotations

import pytest

from clients import (
    BadSequence,
    DeliveryMode,
    ForceJrn,
    MrsTimeout,
    Status,
    connect,
    connect_sync,
    open_journal,
)
from mrs.core.selection import by_class_type

WAIT_S = 30.0
"""Deadline for what the server process must do (a loaded 2-core CI machine)."""


@pytest.fixture
def quiet_pcj_bus(make_bus):
    """Group 1 with the standard queues and `pcj_default = false`: a DEFAULT_JRN
    confirm writes no PCJ record, so each force_j's effect shows on its own."""
    return make_bus(group_extra="pcj_default = false")


async def test_each_force_j_a_double_confirm_and_seqs_not_held(quiet_pcj_bus) -> None:
    """FORCE_JRN writes the PCJ with its confirm value, DEFAULT_JRN (the group's
    default is off) and NO_JRN do not; a second confirm of a seq, a confirm of a
    message that needed none (NN_MEM) and one made on another connection are BADSEQ
    and change nothing: the owner still confirms its message afterwards."""
    address = quiet_pcj_bus.address
    async with connect(address, "SENDER") as sender:
        for body in (b"forced", b"default", b"not journaled", b"owned"):
            await sender.put(body, "ANYORDER", delivery=DeliveryMode.WF_DQF)
        await sender.put(b"memory", "ANYORDER", delivery=DeliveryMode.NN_MEM)
        async with connect(address, "ANYORDER") as receiver:
            got = {m.body: m for m in [await receiver.get(timeout=WAIT_S) for _ in range(5)]}
            assert not got[b"memory"].needs_confirm
            assert all(
                got[body].delivery_status == Status.CONFIRMREQ for body in got if body != b"memory"
            )
            await got[b"forced"].confirm(confirm_value=1234, force_j=ForceJrn.FORCE_JRN)
            await receiver.confirm(got[b"default"].seq)
            await receiver.confirm(got[b"not journaled"].seq, force_j=ForceJrn.NO_JRN)
            for refused in (
                receiver.confirm(got[b"forced"].seq),
                receiver.confirm(got[b"memory"].seq),
                sender.confirm(got[b"owned"].seq),
            ):
                with pytest.raises(BadSequence) as raised:
                    await refused
                assert raised.value.status == Status.BADSEQ
            await got[b"owned"].confirm(force_j=ForceJrn.FORCE_JRN)
            assert await receiver.pending(["ANYORDER"]) == [0]
    with open_journal(quiet_pcj_bus.data_dir, "pcj") as pcj:
        records = [(record.body, record.confirm_value, record.status) for record in pcj]
    assert records == [(b"forced", 1234, Status.SUCCESS), (b"owned", 0, Status.SUCCESS)]


def test_an_implicit_queue_left_after_a_selective_get(quiet_pcj_bus) -> None:
    """On a queue that confirms implicitly, each get confirms the message got before
    it, a selective one too; the program exits (pams_exit) with the last message read
    and not confirmed. The next program gets the one the selection passed over first,
    as a first delivery (CONFIRMREQ), then the unconfirmed one marked POSSDUPL:
    nothing lost, the redelivery marked, the confirmed ones never seen again."""
    address = quiet_pcj_bus.address
    with connect_sync(address, "SENDER") as sender:
        for n in range(4):
            sender.put(b"i%d" % n, "IMPLICIT", msg_class=n)
    with connect_sync(address, "IMPLICIT") as first:
        assert first.get(timeout=WAIT_S).body == b"i0"
        second_got = first.get(timeout=WAIT_S)  # confirms i0
        assert first.get(timeout=WAIT_S, select=by_class_type(3)).body == b"i3"  # confirms i1
        with pytest.raises(BadSequence):
            first.confirm(second_got.seq)  # confirmed already, by the selective get
        assert first.pending(["IMPLICIT"]) == [1]  # i2; i3 delivered, unconfirmed
    with connect_sync(address, "IMPLICIT") as second:
        again = [second.get(timeout=WAIT_S) for _ in range(2)]
        assert [(m.body, m.delivery_status) for m in again] == [
            (b"i2", Status.CONFIRMREQ),
            (b"i3", Status.POSSDUPL),
        ]
        second.confirm(again[1].seq)  # the last one is confirmed explicitly
        with pytest.raises(MrsTimeout):
            second.get(timeout=0.2)
    with connect_sync(address, "IMPLICIT") as third, pytest.raises(MrsTimeout):
        third.get(timeout=0.2)
