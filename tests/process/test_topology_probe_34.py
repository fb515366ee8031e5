"""Probes, round 34: a bus of three groups, each pair linked, one `[[link]]` taken out
of the file while messages and their answers wait for the other end. The groups run
in this trio run (sim/membus.py) under MockClock; a group restarted with the edited
file keeps its journals, as a real one does.

Expected (docs/operations.md, "Changing the bus file while the journals hold
messages"): nothing owed to the unlinked group is lost, what is kept is shown in the
log and `mrs status`, and it is sent once the link is back in the file."""

from __future__ import annotations

import logging
import re

import pytest
import trio

from clients import DeliveryMode, Status, Uma
from mrs.config.bus import load_config
from mrs.tools.status_render import group_notes
from sim.membus import MemoryLinkedBus
from tests.process.test_links import QUEUES, wait_for_link

MODE = DeliveryMode
GET_S = 10.0


async def _three_groups(make_mem_linked) -> MemoryLinkedBus:
    bus = await make_mem_linked(group_ids=(1, 2, 3), queues=QUEUES)
    for low, high in ((1, 2), (1, 3), (2, 3)):
        await wait_for_link(bus, low, high)
    return bus


async def _restart_with(bus: MemoryLinkedBus, group_id: int, *, unlinked: int | None) -> None:
    """Crash `group_id` and start it on its journals with the bus file as written, or
    with the `[[link]]` between it and group `unlinked` taken out of it."""
    config_path = bus.directory / "bus.toml"
    if unlinked is not None:
        pair = sorted((group_id, unlinked))
        low, high = pair
        link = re.compile(rf'\[\[link\]\]\ngroups = \[{low}, {high}\]\naddress = "[^"]*"\n')
        text, removed = link.subn("", config_path.read_text())
        assert removed == 1
        config_path = bus.directory / f"bus-without-{low}-{high}.toml"
        config_path.write_text(text)
    group = bus.memory.groups[group_id]
    group.crash()
    await trio.lowlevel.checkpoint()
    group.bus = load_config(config_path)
    await group.start(bus.memory.nursery)


async def _status(bus: MemoryLinkedBus, group_id: int) -> dict:
    async with bus.connect(group_id, None) as client:
        return await client.status()


async def test_what_a_group_owes_a_group_no_longer_linked_is_shown_and_sent_once_back(
    make_mem_linked, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect: group 1 restarted with its link to group 3 taken out of the file. A
    message of group 3 (AK_CONF) confirmed at group 1 then wrote no confirm notice at
    all: once the link was back, group 3's sender never got its MRS_ACK. And what
    group 1 still owed group 3 (that notice, an MRS_ACK for a queue of group 3) was in
    no log line and no `mrs status` field: only the SAF's was shown. Now the notice
    is journaled and kept like the SAF, both are one WARNING and a status note, and
    both reach group 3 once the link is back."""
    bus = await _three_groups(make_mem_linked)
    async with bus.connect(3, "OUT") as sender_3:
        psb = await sender_3.put(
            b"from 3", target="1.10", delivery=MODE.AK_CONF, uma=Uma.SAF, resp_q="3.12"
        )
    conf_seq = psb.seq
    async with bus.connect(1, "IN") as receiver_1:
        message = await receiver_1.get(timeout=GET_S)  # stored at group 1, unconfirmed
        assert message.body == b"from 3"
        bus.proxy(1, 3).cut()
        await wait_for_link(bus, 1, 3, "down")
        async with bus.connect(1, "OUT") as sender_1:  # its MRS_ACK waits for the link
            ack_psb = await sender_1.put(
                b"to 2", target="2.10", delivery=MODE.AK_DQF, uma=Uma.SAF, resp_q="3.12"
            )
        await wait_for_link(bus, 1, 3, "down", condition=lambda link: link["mrs_acks_owed"] == 1)
    caplog.set_level(logging.WARNING)
    caplog.clear()
    await _restart_with(bus, 1, unlinked=3)
    await wait_for_link(bus, 1, 2)
    async with bus.connect(1, "IN") as receiver_1:
        again = await receiver_1.get(timeout=GET_S)
        assert again.seq == conf_seq
        await receiver_1.confirm(again.seq)  # while group 3 is not linked to group 1
    status = await _status(bus, 1)
    owed = {"3": {"confirm_notices": 1, "mrs_acks": 1}}
    assert status["owed_unlinked_groups"] == owed, status
    assert "owes group 3 1 confirm notices and 1 MRS_ACKs, not linked" in group_notes(status)
    lines = [record.getMessage() for record in caplog.records]
    assert any("MRS_ACKs are owed to group 3" in line for line in lines), lines
    assert any("a confirm notice for group 3" in line for line in lines), lines

    await _restart_with(bus, 1, unlinked=None)  # the link back in the file
    bus.proxy(1, 3).heal()
    await wait_for_link(bus, 1, 3)
    acks = {}
    async with bus.connect(3, "IN2") as replies:
        for _ in range(2):
            reply = await replies.get(timeout=GET_S)
            assert reply.is_mrs_ack
            acks[reply.ack_psb().seq] = reply.ack_psb().delivery_status
    assert acks == {conf_seq: Status.SUCCESS, ack_psb.seq: Status.STORED}
    assert (await _status(bus, 1))["owed_unlinked_groups"] == {}


async def test_uma_saf_to_a_group_not_linked_names_the_missing_link(
    make_mem_linked, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect: a put to a queue of group 3, whose link to group 1 is out of the file,
    with UMA SAF was answered LINK_DOWN + SAF_FAILED (right: no SAF drains to a group
    not linked), but group 1 logged the ERROR `UMA SAF for 3.10: no SAF towards the
    sender's own group`, which sent the operator looking for a mistake in the put."""
    bus = await _three_groups(make_mem_linked)
    await _restart_with(bus, 1, unlinked=3)
    await wait_for_link(bus, 1, 2)
    caplog.clear()
    async with bus.connect(1, "OUT") as sender:
        psb = await sender.put(b"x", target="3.10", delivery=MODE.WF_DQF, uma=Uma.SAF)
    assert (psb.delivery_status, psb.uma_status) == (Status.LINK_DOWN, Status.SAF_FAILED)
    lines = [
        record.getMessage() for record in caplog.records if "UMA SAF for" in record.getMessage()
    ]
    assert lines == [
        "UMA SAF for 3.10: the config has no [[link]] between groups 1 and 3: "
        "no SAF towards group 3"
    ]


async def test_a_put_refused_by_another_group_says_its_status_by_name(make_mem_linked) -> None:
    """Defect: a nonrecoverable put from group 1 that group 3 refused (no such queue
    there) went to group 1's DLQ with the text `group 3 answered -1004` (and so did
    the RTS copy's detail and the DISCL line): a number the operator had to look up.
    Now the status is named, as group 3's own dead letters name theirs."""
    bus = await _three_groups(make_mem_linked)
    async with bus.connect(1, "OUT") as sender:
        psb = await sender.put(b"mem", target="3.50", delivery=MODE.WF_MEM, uma=Uma.DLQ)
    assert (psb.delivery_status, psb.uma_status) == (Status.NOSUCHQUEUE, Status.DLQ_SUCCESS)
    async with bus.connect(1, "DLQ") as handler:
        dead = await handler.get(timeout=GET_S)
    header = dead.dead_letter_header
    assert (header["dest_q_mgr_name"], header["dest_q_name"]) == ("3", "50")
    assert header["text"] == "group 3 answered NOSUCHQUEUE"
