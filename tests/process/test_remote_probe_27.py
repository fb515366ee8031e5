"""Messages to a queue of another group as an application developer sees them, on real
`mrs serve` processes linked through a fault proxy: what each delivery mode's put (or
its MRS_ACK) says when the remote queue is unknown, full or its link is down, where the
UMA ran (RTS back to the sender with `original_target` and `return_reason`), and an
AK_CONF put in flight when the sending group is SIGKILLed (docs/delivery-modes.md,
docs/undeliverable.md, docs/links.md, docs/confirmation.md)."""

from __future__ import annotations

import pytest
import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma
from sim.bus import LinkedBus
from tests.process.test_conformance import QUEUES, WAIT_S, cut, start_bus, status_of, wait_until

pytestmark = pytest.mark.xdist_group("remote_probe_27")

MODE = DeliveryMode
SMALL = """
[[group.queue]]
id = 14
name = "SMALL"
confirm = "explicit-out-of-order"
messages_max = 1
"""


async def answers(client) -> list[tuple]:
    """Everything waiting on the client's queue: returned messages as ("MSG", body,
    original_target, return_reason), MRS_ACKs as ("ACK", seq, delivery, uma), in no
    particular order (`in_any_order`)."""
    found: list[tuple] = []
    while True:
        try:
            message = await client.get(timeout=0.5)
        except (NoMoreMessages, MrsError):
            return in_any_order(found)
        if message.is_mrs_ack:
            psb = message.ack_psb()
            found.append(("ACK", psb.seq, psb.delivery_status, psb.uma_status))
        else:
            assert message.delivery_status == Status.MSGUNDEL
            reason = message.return_reason
            found.append(("MSG", message.body, str(message.original_target), reason))


async def put_each(sender, target: str, modes: list[DeliveryMode]) -> list[tuple]:
    """One RTS put per mode; the PSB each answered (WF: the outcome, AK/NN: accepted)."""
    said = []
    for mode in modes:
        psb = await sender.put(mode.name.encode(), target=target, delivery=mode, uma=Uma.RTS)
        said.append((mode, psb.seq, psb.delivery_status, psb.uma_status))
    return said


def expected(said: list[tuple], target: str, cause_of) -> list[tuple]:
    """What the sender's queue should hold after `put_each`: every message returned
    with where it was going and why, and an MRS_ACK naming the cause after each AK put."""
    wanted: list[tuple] = []
    for mode, seq, _delivery, _uma in said:
        cause = cause_of(mode)
        wanted.append(("MSG", mode.name.encode(), target, cause))
        if mode.name.startswith("AK_"):
            wanted.append(("ACK", seq, cause, Status.RTS_SUCCESS))
    return in_any_order(wanted)


def in_any_order(answers: list[tuple]) -> list[tuple]:
    """`answers` sorted: the outcomes of different puts come in no promised order (an
    AK_CONF message to another group is returned once its journaled copy is deleted,
    a commit after the others' returns)."""
    return sorted(answers, key=repr)


def recoverable_cause(recoverable: Status, nonrecoverable: Status):
    return lambda mode: recoverable if mode.recoverable else nonrecoverable


REMOTE_MODES = [
    MODE.WF_DQF,
    MODE.WF_CONF,
    MODE.WF_MEM,
    MODE.WF_DEQ,
    MODE.WF_ACK,
    MODE.AK_DQF,
    MODE.AK_CONF,
    MODE.AK_MEM,
    MODE.AK_DEQ,
    MODE.AK_ACK,
    MODE.NN_DQF,
    MODE.NN_MEM,
]


async def test_every_mode_to_an_unknown_or_unreachable_remote_queue_comes_back_rts(
    tmp_path, nursery
) -> None:
    """Unknown queue 2.50 (link up), then the link down: each mode's message comes
    back to the sender's queue MSGUNDEL saying where it was going and why, each WF put
    says the cause with RTS_SUCCESS, each AK put gets one MRS_ACK saying the same."""
    bus = await start_bus(tmp_path, nursery, queues=QUEUES + SMALL)
    try:
        async with bus.connect(1, "OUT") as sender:
            cause = recoverable_cause(Status.NO_DQF, Status.NOSUCHQUEUE)
            said = await put_each(sender, "2.50", REMOTE_MODES)
            for mode, _seq, delivery, uma in said:
                if mode.name.startswith("WF_"):
                    assert (delivery, uma) == (cause(mode), Status.RTS_SUCCESS), mode
            assert await answers(sender) == expected(said, "2.50", cause)

            await cut(bus)
            down = recoverable_cause(Status.LINK_DOWN, Status.LINK_DOWN)
            said = await put_each(sender, "2.10", REMOTE_MODES)
            assert await answers(sender) == expected(said, "2.10", down)
            assert (await status_of(bus, 1))["links"]["2"]["saf_backlog"] == 0
    finally:
        bus.stop()


async def test_a_full_remote_queue_returns_each_message_to_its_sender(tmp_path, nursery) -> None:
    """Group 2's queue 14 holds one message (messages_max = 1) and its DQF one record
    (dqf_messages_max = 1): the next nonrecoverable put is EXCEEDQUOTA, the next
    recoverable one DQF_FULL; the RTS UMA runs in the sender's group, which returns
    the message to the sender's queue with original_target 2.14 / 2.10."""
    bus = LinkedBus(
        tmp_path / "bus", queues=QUEUES + SMALL, group_limits={2: "dqf_messages_max = 1"}
    )
    await bus.start_proxies(nursery)
    await trio.to_thread.run_sync(bus.start)
    try:
        await wait_until(bus, 1, lambda status: status["links"]["2"]["state"] == "up")
        async with bus.connect(1, "OUT") as sender:
            await sender.put(b"fill", target="2.14", delivery=MODE.WF_MEM, uma=Uma.RTS)
            fill = await sender.put(b"fill", target="2.10", delivery=MODE.WF_DQF, uma=Uma.RTS)
            assert fill.delivery_status == Status.STORED
            quota = await put_each(sender, "2.14", [MODE.WF_MEM, MODE.AK_MEM, MODE.AK_DEQ])
            assert quota[0][2:] == (Status.EXCEEDQUOTA, Status.RTS_SUCCESS)
            over = lambda _mode: Status.EXCEEDQUOTA  # noqa: E731
            assert await answers(sender) == expected(quota, "2.14", over)
            full = await put_each(sender, "2.10", [MODE.WF_DQF, MODE.AK_DQF, MODE.WF_CONF])
            assert [row[2:] for row in full if row[0].name.startswith("WF_")] == [
                (Status.DQF_FULL, Status.RTS_SUCCESS)
            ] * 2
            dqf_full = lambda _mode: Status.DQF_FULL  # noqa: E731
            assert await answers(sender) == expected(full, "2.10", dqf_full)
    finally:
        bus.stop()


async def test_an_ak_conf_put_in_flight_when_its_group_is_killed_is_not_lost(
    tmp_path, nursery
) -> None:
    """docs/confirmation.md: 'a restart (even SIGKILL) of the sender's group ... before
    the confirm does not lose [the MRS_ACK]; the MRS_ACK arrives once, after the
    confirm'. The link to group 2 swallows what group 1 sends (black hole), the AK_CONF
    put is answered, group 1 is SIGKILLed and started again, the link heals: the
    receiver should get the message and the sender its MRS_ACK."""
    bus = await start_bus(tmp_path, nursery)
    try:
        bus.proxy(1, 2).blackhole("forward")
        async with bus.connect(1, "OUT") as sender:
            psb = await sender.put(b"conf me", target="2.10", delivery=MODE.AK_CONF, uma=Uma.DLJ)
            assert (psb.status, psb.uma_status) == (Status.SUCCESS, Status.UMA_NA)
            await wait_until(bus, 1, lambda status: status["links"]["2"]["in_flight"] == 1)
        await trio.to_thread.run_sync(bus.processes[1].restart)  # SIGKILL, then start
        bus.proxy(1, 2).heal()
        await wait_until(bus, 1, lambda status: status["links"]["2"]["state"] == "up")
        async with bus.connect(2, "IN") as receiver:
            message = await receiver.get(timeout=WAIT_S)
            assert message.body == b"conf me"
            await receiver.confirm(message.seq)
        async with bus.connect(1, "OUT") as sender:
            ack = await sender.get(timeout=WAIT_S)
            assert ack.is_mrs_ack and ack.ack_psb().seq == psb.seq
    finally:
        bus.stop()


async def test_an_ak_conf_message_the_peer_stored_before_the_kill_arrives_once(
    tmp_path, nursery
) -> None:
    """The peer stores the AK_CONF message but its answers cannot come back (black hole
    backward); the receiver gets and confirms it; group 1 is SIGKILLed and started
    again and resends the copy journaled with the debt: the peer drops it as one it
    has (its dedupe key is kept until group 1 lets it go), so the receiver gets it
    once and the sender one MRS_ACK, nothing stays in group 1's SAF and group 2
    forgets the key in the end."""
    bus = await start_bus(tmp_path, nursery)
    try:
        bus.proxy(1, 2).blackhole("backward")
        async with bus.connect(1, "OUT") as sender:
            psb = await sender.put(b"once", target="2.10", delivery=MODE.AK_CONF, uma=Uma.DLJ)
            assert (psb.status, psb.uma_status) == (Status.SUCCESS, Status.UMA_NA)
        async with bus.connect(2, "IN") as receiver:
            message = await receiver.get(timeout=WAIT_S)
            assert message.body == b"once"
            await receiver.confirm(message.seq)
        await trio.to_thread.run_sync(bus.processes[1].restart)  # SIGKILL, then start
        bus.proxy(1, 2).heal()
        await wait_until(bus, 1, lambda status: status["links"]["2"]["state"] == "up")
        async with bus.connect(1, "OUT") as sender:
            ack = await sender.get(timeout=WAIT_S)
            assert ack.is_mrs_ack and ack.ack_psb().seq == psb.seq
            assert await answers(sender) == []
        await wait_until(bus, 1, lambda status: status["links"]["2"]["saf_backlog"] == 0)
        async with bus.connect(2, "IN") as receiver:
            with pytest.raises((NoMoreMessages, MrsError)):  # no second copy
                await receiver.get(timeout=0.5)
        await wait_until(bus, 2, lambda status: status["dedupe_keys"] == 0)  # forgotten
    finally:
        bus.stop()


async def test_the_peer_forgets_a_direct_ak_conf_message_once_its_copy_is_gone(
    tmp_path, nursery
) -> None:
    """An AK_CONF message sent straight over the link keeps its dedupe key at the peer
    until the sender has deleted the copy journaled with its debt; then the forget
    notice goes, and the MRS_ACK comes once the receiver confirms."""
    bus = await start_bus(tmp_path, nursery)
    try:
        async with bus.connect(1, "OUT") as sender:
            psb = await sender.put(b"direct", target="2.10", delivery=MODE.AK_CONF, uma=Uma.DLJ)
            async with bus.connect(2, "IN") as receiver:
                message = await receiver.get(timeout=WAIT_S)
                await wait_until(bus, 2, lambda status: status["dedupe_keys"] == 0)
                await receiver.confirm(message.seq)
            ack = await sender.get(timeout=WAIT_S)
            assert ack.is_mrs_ack and ack.ack_psb().seq == psb.seq
            assert (await status_of(bus, 1))["links"]["2"]["saf_backlog"] == 0
    finally:
        bus.stop()
