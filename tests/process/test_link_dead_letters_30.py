"""A recoverable message a link dead-letters keeps its guarantee: real `mrs serve`
processes, SIGKILLed.

A WF_SAF put is answered STORED once it is in the sender's SAF. When the receiving
group has no such queue, or the message is too big for it, the channel rules put it on
a DLQ (the receiver's, or the sender's own) and the SAF record is deleted. The DLQ is
memory only by default, so before, a SIGKILL of the group holding that DLQ lost a
message its sender had been told was stored. Now such a copy is journaled on the DLQ
whatever its config, as IBM MQ's DLQ keeps a persistent message persistent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import NoMoreMessages, Status, connect_sync
from mrs.model import DeliveryMode, Uma
from sim.ports import free_port
from sim.processes import GroupProcess

WAIT_S = 30.0
QUEUES = '[[group.queue]]\nid = 10\nname = "IN"\n[[group.queue]]\nid = 11\nname = "OUT"\n'


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[tuple[GroupProcess, GroupProcess]]:
    """NYC (group 1) and LDN (group 2, message_bytes_max = 1000), linked, started."""
    groups = []
    for group, name in ((1, "NYC"), (2, "LDN")):
        limits = "[group.limits]\nmessage_bytes_max = 1000\n" if group == 2 else ""
        groups.append(
            f'[[group]]\nid = {group}\nname = "{name}"\nlisten = "127.0.0.1:{free_port()}"\n'
            f'data_dir = "g{group}"\n{limits}{QUEUES}'
        )
    config = tmp_path / "bus.toml"
    config.write_text("\n".join(groups) + "\n[[link]]\ngroups = [1, 2]\n")
    nyc, ldn = GroupProcess(config, 1), GroupProcess(config, 2)
    try:
        ldn.start()
        nyc.start()
        yield nyc, ldn
    finally:
        nyc.terminate()
        ldn.terminate()


def _wait_drained(nyc: GroupProcess) -> None:
    """Until group 1's link to group 2 is up with an empty SAF (every record answered)."""
    deadline = time.monotonic() + WAIT_S
    with connect_sync(nyc.address, None) as client:
        while True:
            link = client.status()["links"]["2"]
            if link["state"] == "up" and link["saf_backlog"] == 0:
                return
            assert time.monotonic() < deadline, link
            time.sleep(0.05)


@pytest.mark.parametrize(
    "target, body, delivery, uma, dlq_group, reason",  # reason: the MQDLH's (MQRC)
    [
        # group 2 has no queue 50: the receiver's refusal, its DLQ
        ("2.50", b"nowhere", DeliveryMode.WF_SAF, Uma.DISC, 2, 2085),
        # too big for group 2: the sender's own refusal, its own DLQ
        ("2.10", b"B" * 2000, DeliveryMode.WF_DQF, Uma.SAF, 1, 2030),
    ],
    ids=["receiver", "sender"],
)
def test_a_stored_message_dead_lettered_by_a_link_survives_a_sigkill(
    linked, target, body, delivery, uma, dlq_group, reason
) -> None:
    nyc, ldn = linked
    with connect_sync(nyc.address, "OUT") as sender:
        psb = sender.put(body, target=target, delivery=delivery, uma=uma)
    # answered as in the SAF: STORED at the SAF interest point, or SAF_SUCCESS by its UMA
    assert psb.delivery_status == Status.STORED or psb.uma_status == Status.SAF_SUCCESS
    _wait_drained(nyc)  # the SAF record is deleted: the DLQ copy is all there is
    holder = (nyc, ldn)[dlq_group - 1]
    holder.restart()  # SIGKILL, then start again
    with connect_sync(holder.address, "DLQ") as dlq:
        message = dlq.get(timeout=WAIT_S)
        assert (message.body, message.seq) == (body, psb.seq)
        assert message.delivery_status == Status.CONFIRMREQ  # never delivered before
        assert message.dead_letter_header["reason"] == reason
    holder.restart()  # got, not confirmed (a lease)
    with connect_sync(holder.address, "DLQ") as dlq:
        again = dlq.get(timeout=WAIT_S)
        assert (again.body, again.seq) == (body, psb.seq)
        assert again.delivery_status == Status.POSSDUPL  # it may have been worked
        dlq.confirm(again.seq)
    holder.restart()
    with connect_sync(holder.address, "DLQ") as dlq, pytest.raises(NoMoreMessages):
        dlq.get(timeout=0)  # confirmed: gone for good
