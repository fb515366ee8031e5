"""The fast seam itself: the in-process bus keeps what a crash keeps, and a test that
livelocks under the autojump clock fails instead of hanging the suite."""

from __future__ import annotations

import pytest
import trio

from clients import DeliveryMode, Status, Uma
from tests import conftest


def test_a_busy_loop_under_the_autojump_clock_fails_instead_of_hanging(monkeypatch) -> None:
    monkeypatch.setattr(conftest, "MEMORY_TEST_WALL_S_MAX", 0.3)

    async def busy() -> None:
        while True:  # always runnable: virtual time never passes
            await trio.sleep(0)

    with pytest.raises(TimeoutError, match="autojump clock"):
        conftest.run_under_autojump_clock(busy)


async def test_a_restart_keeps_committed_messages_and_the_clock_jumps(mem_bus) -> None:
    async with mem_bus.connect("SENDER") as sender:
        psb = await sender.put(b"kept", target="ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
        await sender.put(b"memory only", target="ANYORDER", delivery=DeliveryMode.WF_MEM)
    before = trio.current_time()
    await trio.sleep(3600)  # an hour of bus time, no wall time
    assert trio.current_time() - before >= 3600
    await mem_bus.restart()  # as SIGKILL: the DQF is the journal, memory queues are gone
    async with mem_bus.connect("ORDERS") as orders, mem_bus.connect("ANYORDER") as anyorder:
        assert (await orders.get(timeout=5)).body == b"kept"
        assert (await anyorder.status())["queues"]["1.11"]["pending"] == 0
