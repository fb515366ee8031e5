"""MRS_ACKs owed to another group's response queue survive a restart of the group that
owes them, and arrive exactly once (issue 9; real `mrs serve` processes, SIGKILL, a
fault proxy on the link; a confirm notice across a cut, a rule without a restart, on
the in-process bus)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, NoMoreMessages, Status, connect
from mrs.group import acks
from sim.bus import LinkedBus
from tests.process.test_conformance import QUEUES, WAIT_S, cut, start_bus, start_mem_bus, wait_until

MODE = DeliveryMode


def owed(status: dict, peer: int = 2) -> int:
    return status["links"][str(peer)]["mrs_acks_owed"]


async def test_an_mrs_ack_waiting_for_the_link_survives_a_sigkill(tmp_path, nursery) -> None:
    """Group 1 owes group 2's queue an MRS_ACK while the link is down; group 1 is
    killed and restarted; once the link heals the MRS_ACK arrives, once."""
    bus = await start_bus(tmp_path, nursery)
    try:
        async with connect(bus.address(2), "OTHER") as replies:  # group 2 stays up
            await cut(bus)
            async with connect(bus.address(1), "OUT") as sender:
                psb = await sender.put(b"a", target="1.10", delivery=MODE.AK_DQF, resp_q="2.12")
            await wait_until(bus, 1, lambda status: owed(status) == 1)
            await trio.to_thread.run_sync(bus.processes[1].restart)  # SIGKILL, start again
            assert owed(await wait_until(bus, 1, lambda status: True)) == 1
            bus.proxy(1, 2).heal()
            ack = await replies.get(timeout=WAIT_S)
            assert ack.is_mrs_ack
            assert (ack.ack_psb().seq, ack.ack_psb().delivery_status) == (psb.seq, Status.STORED)
            await wait_until(bus, 1, lambda status: owed(status) == 0)
            with pytest.raises(NoMoreMessages):
                await replies.get(timeout=0)
    finally:
        bus.stop()


async def test_an_ak_conf_ack_for_another_groups_queue_survives_a_sigkill(
    tmp_path, nursery
) -> None:
    """AK_CONF from group 1 to group 2 with its response queue in group 2: group 1 is
    killed once group 2 stored the message, and the MRS_ACK still comes, once, when the
    receiver confirms (the wait was journaled before the put was answered; the
    MRS_ACK travels from group 1's journal to group 2)."""
    bus = await start_bus(tmp_path, nursery)
    try:
        async with connect(bus.address(2), "OTHER") as replies:
            async with connect(bus.address(1), "OUT") as sender:
                psb = await sender.put(b"c", target="2.10", delivery=MODE.AK_CONF, resp_q="2.12")
            assert psb.status == Status.SUCCESS
            await wait_until(bus, 2, lambda status: status["dqf_messages"] == 1)
            await trio.to_thread.run_sync(bus.processes[1].restart)  # SIGKILL
            await wait_until(bus, 1, lambda status: status["links"]["2"]["state"] == "up")
            async with connect(bus.address(2), "IN") as receiver:
                message = await receiver.get(timeout=WAIT_S)
                assert message.body == b"c"
                await receiver.confirm(message.seq)
            ack = await replies.get(timeout=WAIT_S)
            assert (ack.ack_psb().seq, ack.ack_psb().delivery_status) == (psb.seq, Status.SUCCESS)
            await wait_until(bus, 1, lambda status: owed(status) == 0)
            await wait_until(bus, 2, lambda status: status["links"]["1"]["notices_pending"] == 0)
            with pytest.raises(NoMoreMessages):
                await replies.get(timeout=0)
    finally:
        bus.stop()


SILENT_LINK_GUARDS = """
[group.guards]
heartbeat_interval_s = 0.2
link_silence_s_max = 1.5
"""


async def test_an_mrs_ack_resent_after_its_answer_was_lost_is_queued_once(
    tmp_path, nursery
) -> None:
    """The peer queues the MRS_ACK but its answer never comes back (the return path is
    blackholed): group 1 gives the link up and sends the MRS_ACK again when the link is
    back; group 2 knows it and queues it once."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, group_extras={1: SILENT_LINK_GUARDS})
    await bus.start_proxies(nursery)
    await trio.to_thread.run_sync(bus.start)
    try:
        await wait_until(bus, 1, lambda status: status["links"]["2"]["state"] == "up")
        async with connect(bus.address(2), "OTHER") as replies:
            bus.proxy(1, 2).blackhole("backward")  # group 2 -> group 1 bytes vanish
            async with connect(bus.address(1), "OUT") as sender:
                psb = await sender.put(b"a", target="1.10", delivery=MODE.AK_DQF, resp_q="2.12")
            ack = await replies.get(timeout=WAIT_S)  # queued; its answer is lost
            assert ack.ack_psb().seq == psb.seq
            await wait_until(bus, 1, lambda status: status["links"]["2"]["state"] == "down")
            assert owed(await wait_until(bus, 1, lambda status: True)) == 1
            bus.proxy(1, 2).heal()
            await wait_until(bus, 1, lambda status: owed(status) == 0)  # sent again, answered
            with pytest.raises(NoMoreMessages):
                await replies.get(timeout=0)
    finally:
        bus.stop()


async def test_a_confirm_notice_made_while_the_link_is_down_reaches_the_sender(
    make_mem_linked,
) -> None:
    """AK_ACK (nonrecoverable) from group 1 to group 2: the receiver confirms while
    the link is down; the notice waits in group 2 and, once the link heals, group 1
    sends the MRS_ACK, once. (A rule, no restart: on the in-process bus.)"""
    bus = await start_mem_bus(make_mem_linked)
    try:
        async with (
            bus.connect(1, "OUT") as sender,
            bus.connect(2, "OTHER") as receiver,
        ):
            psb = await sender.put(b"ack me", target="2.12", delivery=MODE.AK_ACK)
            message = await receiver.get(timeout=WAIT_S)
            # group 1 has the transfer's answer (else the cut makes it LINK_DOWN)
            await wait_until(bus, 1, lambda status: status["links"]["2"]["in_flight"] == 0)
            await cut(bus)
            await receiver.confirm(message.seq)
            status = await wait_until(bus, 2, lambda status: True)
            assert status["links"]["1"]["receipts_pending"] == 1
            bus.proxy(1, 2).heal()
            ack = await sender.get(timeout=WAIT_S)
            assert (ack.ack_psb().seq, ack.ack_psb().delivery_status) == (psb.seq, Status.SUCCESS)
            await wait_until(bus, 2, lambda status: status["links"]["1"]["receipts_pending"] == 0)
            with pytest.raises(NoMoreMessages):
                await sender.get(timeout=0)
    finally:
        bus.stop()


def test_the_remote_acks_example_runs_as_documented(tmp_path) -> None:
    """docs/links.md's example (two `mrs serve` processes, a kill -9) prints what the
    page says, and the MRS_ACK names the seq the put was answered with."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, str(root / "docs" / "examples" / "remote_acks.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    page = (root / "docs" / "links.md").read_text()
    shown = page.split("It prints:\n\n```text\n", 1)[1].split("```", 1)[0]
    for line in shown.strip().splitlines():
        pattern = ".*".join(re.escape(part) for part in line.split("..."))
        assert re.search(pattern, result.stdout), f"{line!r} not in:\n{result.stdout}"
    put_seq = re.search(r"put answered: seq (\d+)", result.stdout).group(1)
    assert f"MRS_ACK for seq {put_seq}: STORED" in result.stdout


def test_the_receiving_group_remembers_a_bounded_number_of_mrs_acks(monkeypatch) -> None:
    """A resent MRS_ACK is dropped while remembered; past RECENT_ACKS_MAX the oldest
    are forgotten first, the newer still dropped."""
    monkeypatch.setattr(acks, "RECENT_ACKS_MAX", 3)
    recent = acks.RecentAcks()
    assert [recent.first_time(2, seq) for seq in (1, 2, 3)] == [True, True, True]
    assert not recent.first_time(2, 2)  # resent: a copy
    assert recent.first_time(3, 2)  # same seq from another group: not a copy
    assert len(recent.seen) == 3
    assert recent.first_time(2, 1)  # the oldest was forgotten
    assert not recent.first_time(2, 3) and not recent.first_time(3, 2)
