"""A link peer that lies in its answers to notices, as a scripted fake group speaking
the link protocol over a real TCP socket, against real `mrs serve` processes.

Group 1 holds a durable confirm notice (mrs.group.notices) for group 2's AK_CONF
put; group 2 is down and a liar answers at its address. Whatever the liar's LinkAck
claims, group 1 forgets the notice only when the answer names it: a lie drops the
link with one line, the notice is sent again, and the real group 2, back, gets it
(its sender gets the MRS_ACK)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, MrsError, Status, Uma
from journals import JournalStore
from mrs import protocol as wire
from mrs.group.incarnation import INCARNATION_KEY
from sim.bus import LinkedBus
from tests.process.test_link_peer_25c import LinkPeer, _lines
from tests.process.test_link_probes import GUARDS, QUEUES
from tests.process.test_links import link_state, wait_for_link

_SUCCESS = int(Status.SUCCESS)

Lie = Callable[[wire.LinkNotice], list[wire.LinkResult]]
"""What the fake peer answers a LinkNotice with."""


def _honest(notice: wire.LinkNotice) -> list[wire.LinkResult]:
    return [wire.LinkResult(item.seq, _SUCCESS, item.seq) for item in notice.notices]


def _acks_nothing(_notice: wire.LinkNotice) -> list[wire.LinkResult]:
    return []


def _another_seq(notice: wire.LinkNotice) -> list[wire.LinkResult]:
    return [wire.LinkResult(item.seq + 7, _SUCCESS, item.seq + 7) for item in notice.notices]


def _not_taken(notice: wire.LinkNotice) -> list[wire.LinkResult]:
    fail = int(Status.JOURNAL_FAIL)
    return [wire.LinkResult(item.seq, fail, item.seq) for item in notice.notices]


def _one_more(notice: wire.LinkNotice) -> list[wire.LinkResult]:
    return [*_honest(notice), wire.LinkResult(99, _SUCCESS, 99)]


@dataclass
class NoticeLiar(LinkPeer):
    """Group 2 as a scripted fake (`LinkPeer`): welcomes group 1's link with group
    2's journals' incarnation, answers pings, and answers each LinkNotice as `lie`
    says. Counts the confirm notices it was sent (each frame that holds one)."""

    lie: Lie
    incarnation: bytes = b""
    echoes: int = 0
    """Acks sent after each honest one: that one again, and one for an id never sent."""
    conf_frames: int = 0
    changed: trio.Event = field(default_factory=trio.Event)

    def welcome(self) -> wire.Welcome:
        return wire.Welcome(wire.PROTOCOL_VERSION, 2, "G2", 0, self.incarnation)

    def _replies(self, event: object) -> list[object]:
        if isinstance(event, wire.LinkNotice):
            if any(isinstance(item, wire.ConfNotice) for item in event.notices):
                self._count("conf_frames")
                ack = wire.LinkAck(event.request_id, self.lie(event))
                made_up = wire.LinkAck(event.request_id + 1000, ack.results)
                return [ack, *[ack, made_up] * self.echoes]
            return [wire.LinkAck(event.request_id, _honest(event))]
        if isinstance(event, wire.LinkPendingQuery):  # answered as if it were a notice
            return [wire.LinkAck(event.request_id, [])]
        return super()._replies(event) or []


def _incarnation(bus: LinkedBus, group: int) -> bytes:
    """A stopped group's journals' incarnation (what its link Welcome says)."""
    store = JournalStore(bus.data_dir(group) / "journals")
    try:
        incarnation = store.meta_get(INCARNATION_KEY)
    finally:
        store.close()
    assert incarnation, f"group {group} has linked: its journals have an incarnation"
    return bytes(incarnation)


async def _notice_for_stopped_group_2(bus: LinkedBus) -> int:
    """Group 2 puts AK_CONF to group 1, stops; group 1's receiver confirms: group 1
    journals a confirm notice for group 2. The put's seq."""
    await trio.to_thread.run_sync(bus.start)
    await wait_for_link(bus, 1, 2)
    async with bus.connect(2, "OUT") as sender, bus.connect(1, "IN") as receiver:
        psb = await sender.put(b"c", target="1.10", delivery=DeliveryMode.AK_CONF, uma=Uma.DISC)
        assert psb.delivery_status == Status.SUCCESS, psb
        message = await receiver.get(timeout=10)
        await trio.to_thread.run_sync(bus.processes[2].terminate)
        await wait_for_link(bus, 1, 2, "down")
        await receiver.confirm(message.seq)
    await wait_for_link(bus, 1, 2, condition=lambda info: info["notices_pending"] == 1)
    return psb.seq


@pytest.mark.parametrize(
    ("lie", "why"),
    [
        (_acks_nothing, "answers 0 notices, 1 were sent"),
        (_another_seq, "does not answer notice 0"),
        (_not_taken, "JOURNAL_FAIL"),
        (_one_more, "answers 2 notices, 1 were sent"),
    ],
    ids=["acks-nothing", "another-seq", "not-taken", "one-more"],
)
async def test_a_lying_ack_to_a_confirm_notice_keeps_it(
    tmp_path: Path, nursery: trio.Nursery, lie: Lie, why: str
) -> None:
    """A LinkAck answering a LinkNotice was not checked: a peer that answered a
    confirm notice with no result (or another seq's, or a refusal) had group 1
    delete the durable notice, and the AK_CONF sender's MRS_ACK never came. Now such
    an answer is a protocol error: one line, the link drops, the notice is kept and
    sent again, and the real group 2 gets it."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True, group_extra=GUARDS)
    try:
        seq = await _notice_for_stopped_group_2(bus)
        liar = NoticeLiar(lie, _incarnation(bus, 2))
        async with trio.open_nursery() as tasks:
            await tasks.start(liar.serve, bus.ports[2])
            with trio.fail_after(20):  # sent again after the drop: it was kept
                await liar.wait_for("conf_frames", 2)
            tasks.cancel_scope.cancel()
        assert (await link_state(bus, 1, 2))["notices_pending"] == 1
        await trio.to_thread.run_sync(bus.processes[2].start)
        async with bus.connect(2, "OUT") as sender:
            ack = await sender.get(timeout=20)
        assert ack.ack_psb().seq == seq and ack.ack_psb().delivery_status == Status.SUCCESS
        await wait_for_link(bus, 1, 2, condition=lambda info: info["notices_pending"] == 0)
    finally:
        bus.stop()
    refused = _lines(bus, 1, why)
    assert 1 <= len(refused) <= 2 and "link to group 2 down: protocol error" in refused[0], refused
    assert not _lines(bus, 1, "Traceback")


async def test_answers_to_nothing_in_flight_are_one_line(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A peer that answered a notice twice, and answered a frame never sent, was not
    seen: the answers were dropped unsaid. Now they are one WARNING per interval (and
    change nothing: the first answer took the notice, the link stays up)."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True, group_extra=GUARDS)
    try:
        await _notice_for_stopped_group_2(bus)
        liar = NoticeLiar(_honest, _incarnation(bus, 2), echoes=3)
        async with trio.open_nursery() as tasks:
            await tasks.start(liar.serve, bus.ports[2])
            with trio.fail_after(20):
                await liar.wait_for("conf_frames", 1)
            await wait_for_link(bus, 1, 2, condition=lambda info: info["notices_pending"] == 0)
            info = await link_state(bus, 1, 2)
            tasks.cancel_scope.cancel()
    finally:
        bus.stop()
    assert info["state"] == "up" and liar.conf_frames == 1, info
    said = _lines(bus, 1, "answers no frame in flight (never sent, or answered already)")
    during = [line for line in said if "logged as the server stops" not in line]
    assert len(during) == 1 and "WARNING" in during[0], said  # the rest counted at the stop
    assert not _lines(bus, 1, "protocol error") and not _lines(bus, 1, "Traceback")


async def test_an_ack_answering_a_pending_query_drops_the_link(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A client's pending count of another group's queue is asked over the link; a
    peer that answered the LinkPendingQuery with a LinkAck had the query forgotten
    unanswered, and the client waited the 5 s query limit for TIMEOUT. Now it is a
    protocol error: the link drops and the client hears LINK_DOWN at once."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True, group_extra=GUARDS)
    liar = NoticeLiar(_honest)
    await nursery.start(liar.serve, bus.ports[2])
    try:
        await trio.to_thread.run_sync(bus.processes[1].start)
        await wait_for_link(bus, 1, 2)
        async with bus.connect(1, "IN") as client:
            started_s = trio.current_time()
            with pytest.raises(MrsError) as refused:
                await client.pending(["2.10"])
            waited_s = trio.current_time() - started_s
    finally:
        bus.stop()
    assert refused.value.status == Status.LINK_DOWN, refused.value
    assert waited_s < 2.0, f"answered after {waited_s:.1f} s"
    assert len(_lines(bus, 1, "protocol error: LinkAck answers LinkPendingQuery")) == 1
    assert not _lines(bus, 1, "Traceback")
