"""A confirm notice from a peer group for a message this group sent to ANOTHER group,
with real `mrs serve` processes and a scripted fake group 2 over a real TCP socket.

Group 1 puts AK_CONF to group 3 and restarts: the MRS_ACK it owes is then only in
its journal (mrs.group.acks.AckWaits). That record named the response queue, not
the group the message went to, so a ConfNotice from group 2 for that seq had group
1 send the sender a SUCCESS MRS_ACK although group 3's receiver never confirmed.
Now only group 3's notice settles it (docs/security.md: a group is not trusted for
being any other group)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, Uma
from mrs import protocol as wire
from sim.bus import LinkedBus
from tests.process.test_link_ack_26 import NoticeLiar, _honest, _incarnation, _lines
from tests.process.test_link_probes import GUARDS, QUEUES
from tests.process.test_links import link_state, wait_for_link

_FORGED_ID = 7_000_001
"""The request id of the fake group 2's LinkNotice (its own id space on the link)."""


@dataclass
class ForeignConfirmer(NoticeLiar):
    """Group 2 as a fake that, once it welcomed group 1's link, tells it that `seq`
    (a message group 1 sent to group 3) was confirmed here; `answered` is set when
    group 1's LinkAck to that notice arrives, with its results."""

    seq: int = 0
    results: list[wire.LinkResult] = field(default_factory=list)
    answered: trio.Event = field(default_factory=trio.Event)

    def _replies(self, event: object) -> list[object]:
        if isinstance(event, wire.Hello):
            confirm = wire.ConfNotice(self.seq, int(Status.SUCCESS))
            return [*super()._replies(event), wire.LinkNotice(_FORGED_ID, [confirm])]
        if isinstance(event, wire.LinkAck) and event.request_id == _FORGED_ID:
            self.results = list(event.results)
            self.answered.set()
            return []
        return super()._replies(event)


async def _pending_acks(bus: LinkedBus) -> int:
    """MRS_ACKs waiting for the AK_CONF sender on group 1's OUT queue."""
    async with bus.connect(1, "OUT") as sender:
        return (await sender.pending(["OUT"]))[0]


@pytest.mark.parametrize("restart", [True, False], ids=["after-restart", "in-flight"])
async def test_a_confirm_notice_from_another_group_acks_nothing(
    tmp_path: Path, nursery: trio.Nursery, restart: bool
) -> None:
    """Group 2 says it confirmed what group 1 sent to group 3: group 1 answers the
    notice (so an honest but confused peer does not send it for ever), logs one
    WARNING, and sends no MRS_ACK; group 3's real confirm sends exactly one. After a
    restart of group 1 the false one came from the journaled record; without one,
    from the same record while the put's waiter sat in group 3's table, and group
    3's confirm then sent a second."""
    bus = LinkedBus(
        tmp_path / "bus", group_ids=(1, 2, 3), queues=QUEUES, direct=True, group_extra=GUARDS
    )
    try:
        await trio.to_thread.run_sync(bus.start)
        await wait_for_link(bus, 1, 2)
        await wait_for_link(bus, 1, 3)
        async with bus.connect(3, "IN") as receiver:
            async with bus.connect(1, "OUT") as sender:
                delivery = DeliveryMode.AK_CONF
                psb = await sender.put(b"c", target="3.10", delivery=delivery, uma=Uma.DISC)
            assert psb.delivery_status == Status.SUCCESS, psb
            message = await receiver.get(timeout=10)  # at group 3, held unconfirmed
            await trio.to_thread.run_sync(bus.processes[2].terminate)
            if restart:  # the MRS_ACK owed is then only in group 1's journal
                await trio.to_thread.run_sync(bus.processes[1].terminate)
            liar = ForeignConfirmer(_honest, _incarnation(bus, 2), seq=psb.seq)
            await nursery.start(liar.serve, bus.ports[2])
            if restart:
                await trio.to_thread.run_sync(bus.processes[1].start)
            with trio.fail_after(20):  # without a restart, group 1 dials again
                await liar.answered.wait()
            assert [(r.seq, r.status) for r in liar.results] == [(psb.seq, 1)], liar.results
            assert await _pending_acks(bus) == 0, "group 2's notice acknowledged group 3's put"
            await wait_for_link(bus, 1, 3)
            await receiver.confirm(message.seq)
        async with bus.connect(1, "OUT") as sender:
            ack = await sender.get(timeout=20)
            assert ack.ack_psb().seq == psb.seq, ack.ack_psb()
            assert ack.ack_psb().delivery_status == Status.SUCCESS, ack.ack_psb()
            await wait_for_link(bus, 3, 1, condition=lambda info: info["notices_pending"] == 0)
            assert (await sender.pending(["OUT"]))[0] == 0, "a second MRS_ACK"
        assert (await link_state(bus, 1, 3))["state"] == "up"
    finally:
        bus.stop()
    said = _lines(bus, 1, f"seq {psb.seq}")
    warned = [line for line in said if "group 2" in line and "group 3" in line]
    assert len(warned) == 1 and "WARNING" in warned[0], said
    assert not _lines(bus, 1, "Traceback")
