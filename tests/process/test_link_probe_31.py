"""Links between groups, probed with real `mrs serve` processes (session 31): `mrs
admin reset-link` on a peer that is merely stopped (behind a fault proxy), and a peer
that answers a message stored under a seq that is not its own (a fake group 2)."""

from __future__ import annotations

import trio

from clients import DeliveryMode, Status, Uma
from mrs import protocol as wire
from tests.cli_helpers import one_line, run_mrs
from tests.process.test_link_probes import FakePeer, _group_1_facing
from tests.process.test_links import drain, proc_bus, wait_for_link

__all__ = ["proc_bus"]  # the fixture: two real groups behind a fault proxy

WAIT_S = 20.0


async def _dqf_messages(bus, group: int) -> int:
    async with bus.connect(group, None) as client:
        return (await client.status())["dqf_messages"]


async def test_reset_link_of_a_merely_stopped_peer_is_refused(proc_bus) -> None:
    """Group 1 forwards five WF_SAF puts; group 2 stores them, its answers are
    blackholed, so group 1 still holds them in its SAF; group 1 is stopped (SIGTERM,
    same journals) and group 2's receiver takes and confirms the five. Before, `mrs
    admin reset-link 1` on group 2 was accepted (the link was down) and deleted their
    dedupe keys: group 1, started again, resent them and group 2 delivered each a
    second time, unmarked (CONFIRMREQ). Now the reset is refused in one line (group
    1's link was never refused for its journals) and nothing comes twice; `--force`
    still resets."""
    bodies = [b"saf %d" % index for index in range(5)]
    proc_bus.proxy(1, 2).blackhole("backward")
    async with proc_bus.connect(1, "OUT") as sender:
        for body in bodies:
            await sender.put(body, target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
    with trio.fail_after(WAIT_S):
        while await _dqf_messages(proc_bus, 2) < len(bodies):
            await trio.sleep(0.02)
    await trio.to_thread.run_sync(proc_bus.processes[1].terminate)
    proc_bus.proxy(1, 2).heal()
    await wait_for_link(proc_bus, 2, 1, "down")

    config = ("--config", str(proc_bus.config_path), "--group", "2")
    refused = run_mrs("admin", "reset-link", "1", *config)
    one_line(refused, 1, "has not refused group 1's link for its journals", "--force")
    async with proc_bus.connect(2, "IN") as receiver:
        assert [message.body for message in await drain(receiver, 5)] == bodies
    await trio.to_thread.run_sync(proc_bus.processes[1].start)
    await wait_for_link(proc_bus, 1, 2, "up", backlog=0)
    async with proc_bus.connect(2, "IN") as receiver:
        await drain(receiver, 0)  # before: the five again, CONFIRMREQ

    await trio.to_thread.run_sync(proc_bus.processes[1].terminate)
    await wait_for_link(proc_bus, 2, 1, "down")
    forced = run_mrs("admin", "reset-link", "1", "--force", *config)
    assert forced.returncode == 0 and "link with group 1 reset" in forced.stdout, forced


def _stored_under_another_seq(transfer: wire.LinkTransfer) -> list[wire.LinkResult]:
    return [wire.LinkResult(m.seq, int(Status.STORED), 12345) for m in transfer.messages]


async def test_a_peer_storing_an_unkeyed_message_under_another_seq_is_not_believed(
    tmp_path, nursery
) -> None:
    """A fake group 2 answers a WF_DQF put sent straight over the link STORED under
    seq 12345. Only a copy of a keyed put is stored under another (its first copy's)
    seq; before, this one was taken for such a copy and its sender was told its
    message is seq 12345. Now the put is answered under its own seq, and group 1 logs
    one WARNING naming the peer."""
    bus = await _group_1_facing(tmp_path, nursery, FakePeer(_stored_under_another_seq))
    try:
        await wait_for_link(bus, 1, 2)
        async with bus.connect(1, "OUT") as sender:
            psb = await sender.put(b"x", target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
    finally:
        bus.stop()
    assert psb.delivery_status == Status.STORED and psb.seq != 12345, psb
    log = (bus.directory / "group1.log").read_text()
    assert f"group 2 answered message {psb.seq} stored under seq 12345" in log
