"""A peer that refuses direct puts is said in the sending group's log, once per
state: its full DQF sent every put to its UMA here with nothing logged."""

from __future__ import annotations

import logging

from clients import DeliveryMode, Status, Uma
from tests.process.test_conformance import start_mem_bus


async def test_a_peer_refusing_direct_puts_is_one_line_in_the_senders_log(
    make_mem_linked, caplog
) -> None:
    """Before: 708 puts refused DQF_FULL by a peer in an incident drill went into the
    sender's DLJ, and the sender's log said nothing of it."""
    bus = await start_mem_bus(make_mem_linked, group_limits={2: "dqf_messages_max = 1"})
    try:
        with caplog.at_level(logging.WARNING):
            async with bus.connect(1, "OUT") as sender:
                await sender.put(b"fills it", target="2.10", delivery=DeliveryMode.WF_DQF)
                for index in range(5):
                    psb = await sender.put(
                        b"%d" % index, target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
                    )
                    assert psb.delivery_status == Status.DQF_FULL
    finally:
        bus.stop()
    said = [r.getMessage() for r in caplog.records if "refuses direct puts" in r.getMessage()]
    assert said == [
        "group 2 refuses direct puts DQF_FULL: each takes its UMA here (DLJ, DLQ, RTS, ...); "
        "`mrs status` of group 2 says why"
    ], said
