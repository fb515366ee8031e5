"""`mrs admin browse` of a queue with one damaged DQF record shows the others.

Before: a waiting message whose body was on disk only (a journaled message given
back by a reader that left: its body is dropped once delivered) was read back for
browse with no guard, so one record that did not decode failed the whole browse with
a server error, and the operator could see none of the queue's messages. Now that one
is shown with no body, and one line names it in the server's log."""

from __future__ import annotations

import logging

import pytest

from clients import DeliveryMode, Uma
from journals import Journal, WriteBatch, queue_key

BODIES = [b"order %d" % index for index in range(3)]
ANYORDER = 11


async def test_one_damaged_record_does_not_hide_the_queue_from_browse(
    make_mem_bus, caplog: pytest.LogCaptureFixture
) -> None:
    bus = await make_mem_bus()
    async with bus.connect("SENDER") as sender:
        seqs = [
            (await sender.put(body, "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)).seq
            for body in BODIES
        ]
    async with bus.connect("ANYORDER") as reader:  # holds them, then leaves: given back
        assert [(await reader.get(timeout=5)).body for _ in BODIES] == BODIES
    damaged = WriteBatch.empty().put_raw(Journal.DQF, queue_key(ANYORDER, seqs[1]), b"\xc1 x")
    bus.store.commit_now(damaged)
    async with bus.connect("SENDER") as admin:
        with caplog.at_level(logging.WARNING, logger="mrs.admin"):
            browsed = await admin.admin("browse", queue="ANYORDER")
    shown = {message["seq"]: message for message in browsed["messages"]}
    assert sorted(shown) == seqs
    assert shown[seqs[0]]["size"] == len(BODIES[0])
    assert shown[seqs[2]]["size"] == len(BODIES[2])
    assert shown[seqs[1]]["size"] == 0
    assert any(str(seqs[1]) in record.getMessage() for record in caplog.records)
