"""Fault injection against real `mrs serve` processes (session 31): a SAF drain whose
deletions the sending group's journal keeps failing (the harness's fault file)."""

from __future__ import annotations

import trio

from clients import DeliveryMode, Status, Uma
from sim.bus import LinkedBus
from tests.process.test_links import QUEUES, drain, wait_for_link

MODE = DeliveryMode
WAIT_S = 20.0
FAILING_S = 1.5
"""How long the deletions keep failing while the log is watched."""


def _delete_lines(bus: LinkedBus) -> int:
    return (bus.directory / "group1.log").read_text().count("could not delete")


async def test_a_saf_drain_whose_deletions_fail_backs_off(tmp_path, nursery) -> None:
    """Group 1 holds five WF_SAF messages for group 2 in its SAF (the link cut); its
    journal then fails every commit (EIO) and the link heals: group 2 stores the five,
    and group 1 cannot delete them. Before, the drain started again at once, at the
    link's round-trip rate, with an ERROR line each time (about 1,000 lines a second
    in `mrs sim run disk-full`); now it backs off and says so once. With the journal
    sound again, the five are deleted and group 2's receiver gets each once."""
    fault = tmp_path / "fault"
    fault.write_text("")
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES)
    bus.processes[1].env["MRS_FAULT_FILE"] = str(fault)
    await bus.start_proxies(nursery)
    await trio.to_thread.run_sync(bus.start)
    try:
        await wait_for_link(bus, 1, 2)
        bus.proxy(1, 2).cut()
        await wait_for_link(bus, 1, 2, "down")
        bodies = [b"saf %d" % index for index in range(5)]
        async with bus.connect(1, "OUT") as sender:
            for body in bodies:
                psb = await sender.put(body, target="2.10", delivery=MODE.WF_SAF, uma=Uma.DLJ)
                assert psb.delivery_status in (Status.STORED, Status.SAF_FORCED), psb
        fault.write_text("EIO")
        bus.proxy(1, 2).heal()
        with trio.fail_after(WAIT_S):
            while _delete_lines(bus) == 0:
                await trio.sleep(0.02)
        await trio.sleep(FAILING_S)  # a flood shows as lines over time: nothing to await
        assert _delete_lines(bus) <= 2, _delete_lines(bus)
        fault.write_text("")
        await wait_for_link(bus, 1, 2, "up", backlog=0)
        async with bus.connect(2, "IN") as receiver:
            messages = await drain(receiver, len(bodies))
        assert [message.body for message in messages] == bodies
        assert {message.delivery_status for message in messages} == {Status.CONFIRMREQ}
    finally:
        bus.stop()
