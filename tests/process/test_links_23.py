"""Links broken on purpose, with real `mrs serve` processes behind the fault proxy
(sim.proxy): a half-open link whose acknowledgements vanish while TCP stays up, and a
link to a group configured but never started (docs/links.md, docs/undeliverable.md).
Each checks what the users on both ends see: every acknowledged message once and in
order, the MRS_ACKs of AK_CONF puts with their seqs, what the put answers once the
SAF is full, the link rows of `mrs status`, and the receiving group's log."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma
from sim.bus import LinkedBus
from tests.process.test_links import link_state, wait_for_link

MODE = DeliveryMode
QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-in-order"
[[group.queue]]
id = 11
name = "OUT"
[[group.queue]]
id = 12
name = "ACKS"
"""
GUARDS = "[group.guards]\nheartbeat_interval_s = 0.3\nlink_silence_s_max = 1.5\n"
WAIT_S = 30.0
RESENT = 40
SAF_MAX = 4


@pytest.fixture
async def half_open_bus(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[LinkedBus]:
    """Groups 1 and 2 up, linked through a fault proxy, quick to give a silent link up."""
    linked = LinkedBus(tmp_path / "bus", queues=QUEUES, group_extra=GUARDS)
    await linked.start_proxies(nursery)
    await trio.to_thread.run_sync(linked.start)
    await wait_for_link(linked, 1, 2)
    yield linked
    linked.stop()


async def mrs_acks(client, count: int) -> list[tuple[int, Status, Status]]:
    """`count` MRS_ACKs from the client's queue, then nothing more."""
    acks = []
    for _ in range(count):
        psb = (await client.get(timeout=WAIT_S)).ack_psb()
        acks.append((psb.seq, psb.delivery_status, psb.uma_status))
    with pytest.raises((NoMoreMessages, MrsError)):
        await client.get(timeout=0.5)
    return acks


async def test_acknowledgements_lost_on_a_half_open_link_resend_once_without_a_warning(
    half_open_bus: LinkedBus,
) -> None:
    """Group 2's answers vanish (TCP stays up) while group 1 drains WF_SAF and AK_CONF
    puts: group 2 stores them all, group 1 hears nothing, declares the link down after
    link_silence_s_max and resends every one once it heals. Each arrives once, in
    order, unmarked (never handed out before), and each AK_CONF sender gets one
    MRS_ACK with its seq once confirmed. Before, group 2 logged the resend as a
    WARNING that reads like replaced journals ("under seqs this group holds
    already"), after every cut mid-transfer; now it is INFO."""
    bus = half_open_bus
    bus.proxy(1, 2).blackhole("backward")
    seqs, conf_seqs = [], []
    async with bus.connect(1, "OUT") as sender:
        for index in range(RESENT):
            mode = MODE.AK_CONF if index % 2 else MODE.WF_SAF
            psb = await sender.put(
                str(index).encode(),
                target="2.10",
                delivery=mode,
                uma=Uma.SAF if mode is MODE.AK_CONF else Uma.DISC,
                resp_q="1.12",
            )
            seqs.append(psb.seq)
            if mode is MODE.AK_CONF:
                conf_seqs.append(psb.seq)
    await wait_for_link(bus, 1, 2, "down", backlog=RESENT)  # nothing it sent was answered
    bus.proxy(1, 2).heal()
    await wait_for_link(bus, 1, 2, "up", backlog=0)
    async with bus.connect(2, "IN") as receiver:
        got = []
        for _ in range(RESENT):
            message = await receiver.get(timeout=WAIT_S)
            got.append((message.seq, message.body, message.delivery_status))
            await receiver.confirm(message.seq)
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)
    assert got == [(seq, str(index).encode(), Status.CONFIRMREQ) for index, seq in enumerate(seqs)]
    async with bus.connect(1, "ACKS") as acks:
        assert await mrs_acks(acks, len(conf_seqs)) == [
            (seq, Status.SUCCESS, Status.NO_UMA) for seq in conf_seqs
        ]
    log = (bus.directory / "group2.log").read_text(errors="replace")
    resent = re.findall(r"(\w+) mrs\.forwarding: group 1 sent \d+ message\(s\) under seqs", log)
    assert resent and set(resent) == {"INFO"}, log[-3000:]


async def test_a_group_never_started_fills_a_bounded_saf_and_each_put_is_told(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Group 2 is configured but never started; group 1's SAF holds saf_messages_max.
    The puts that fit are answered as stored for later (LINK_DOWN + SAF_SUCCESS, then
    SAF_FORCED behind it); past the bound a SAF mode answers MRS_RES_EXH with its
    UMA's status, a DQF mode with UMA SAF MRS_RES_EXH + SAF_FAILED (an AK_DQF in its
    MRS_ACK), and nothing grows: status shows the link down with SAF_MAX waiting.
    Once group 2 starts the SAF_MAX messages arrive, in order, once."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, limits=f"saf_messages_max = {SAF_MAX}")
    await bus.start_proxies(nursery)
    await trio.to_thread.run_sync(bus.processes[1].start)
    try:
        async with bus.connect(1, "OUT") as sender:
            told, stored = [], []
            for index in range(SAF_MAX + 3):
                body = str(index).encode()
                psb = await sender.put(body, target="2.10", delivery=MODE.WF_DQF, uma=Uma.SAF)
                told.append((psb.delivery_status, psb.uma_status))
                if psb.uma_status == Status.SAF_SUCCESS or psb.delivery_status.value > 0:
                    stored.append(body)
            late = await sender.put(b"late", target="2.10", delivery=MODE.WF_SAF, uma=Uma.DLJ)
            ak = await sender.put(b"ak", target="2.10", delivery=MODE.AK_DQF, uma=Uma.SAF)
            ack = (await sender.get(timeout=WAIT_S)).ack_psb()
            link = (await sender.status())["links"]["2"]
        assert (
            told
            == [(Status.LINK_DOWN, Status.SAF_SUCCESS)]
            + [(Status.SAF_FORCED, Status.NO_UMA)] * (SAF_MAX - 1)
            + [(Status.MRS_RES_EXH, Status.SAF_FAILED)] * 3
        )
        assert (late.delivery_status, late.uma_status) == (Status.MRS_RES_EXH, Status.DLJ_SUCCESS)
        assert (ack.seq, ack.delivery_status, ack.uma_status) == (
            ak.seq,
            Status.MRS_RES_EXH,
            Status.SAF_FAILED,
        )
        assert (link["state"], link["saf_backlog"]) == ("down", SAF_MAX)
        await trio.to_thread.run_sync(bus.processes[2].start)
        await wait_for_link(bus, 1, 2, "up", backlog=0)
        async with bus.connect(2, "IN") as receiver:
            bodies = []
            for _ in range(SAF_MAX):
                message = await receiver.get(timeout=WAIT_S)
                bodies.append(message.body)
                await receiver.confirm(message.seq)
            with pytest.raises(NoMoreMessages):
                await receiver.get(timeout=0)
        assert bodies == stored
        assert (await link_state(bus, 2, 1))["state"] == "up"
    finally:
        bus.stop()
