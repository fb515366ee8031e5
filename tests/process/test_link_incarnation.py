"""A link refuses a peer group whose journals are not the ones it linked with before
(mrs.group.incarnation), until an operator runs `mrs admin reset-link`; real `mrs
serve` processes, a fault proxy and the real CLI.

Why: a receiving group dedupes a transferred message by (origin group, seq). A second
process serving group 1 from a fresh data directory counts its seqs from the same
start as the first; group 2 took its messages for resends of the first one's, answered
them stored and kept none of them."""

from __future__ import annotations

import contextlib
import re

import msgspec
import trio

from clients import DeliveryMode, MrsError, Status, Uma
from journals import Journal, JournalStore, WriteBatch
from mrs import protocol as wire
from mrs.core.seqspace import RESERVE_FIRST, RESERVED_KEY
from sim.bus import LinkedBus
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs
from tests.process.test_links import QUEUES, drain, proc_bus, wait_for_link

__all__ = ["proc_bus"]  # the fixture: two real groups behind a fault proxy

WAIT_S = 20.0


async def _dqf_messages(bus: LinkedBus, group: int) -> int:
    async with bus.connect(group, None) as client:
        return (await client.status())["dqf_messages"]


async def _logged(bus: LinkedBus, group: int, pattern: str) -> str:
    """The first line of the group's log matching `pattern`, once it is written (the
    refusal has no event another process can await: the log is polled)."""
    path = bus.directory / f"group{group}.log"
    with trio.fail_after(WAIT_S):
        while True:
            for line in path.read_text(errors="replace").splitlines():
                if re.search(pattern, line):
                    return line
            await trio.sleep(0.05)


def _second_group_one(bus: LinkedBus) -> GroupProcess:
    """Group 1 started again from a config whose group 1 has a fresh data directory
    (another host's process): same id, same link, other journals."""
    assert bus.config_path is not None
    text = bus.config_path.read_text()
    text = text.replace(f'127.0.0.1:{bus.ports[1]}"', f'127.0.0.1:{free_port()}"', 1)
    text = text.replace('data_dir = "g1"', 'data_dir = "g1-other"', 1)
    path = bus.directory / "bus-other.toml"
    path.write_text(text)
    return GroupProcess(path, 1, log_path=bus.directory / "group1.log")


def _counting_from_the_first(bus: LinkedBus) -> None:
    """The second process's journals count from the first process's first seq, as two
    processes started at the same moment do (a fresh group counts from its wall clock:
    mrs.core.seqspace.fresh_start): the collision."""
    first = JournalStore(bus.data_dir(1) / "journals")
    try:
        reserved = int.from_bytes(first.meta_get(RESERVED_KEY.decode()), "big")
    finally:
        first.close()
    other = JournalStore(bus.directory / "g1-other" / "journals")
    try:  # the first process's one block: its first seq
        start = (reserved - RESERVE_FIRST).to_bytes(8, "big")
        other.commit_now(WriteBatch.empty().put_raw(Journal.META, RESERVED_KEY, start))
    finally:
        other.close()


async def _store_unanswered(bus: LinkedBus, bodies: list[bytes]) -> None:
    """Group 1 sends `bodies`; group 2 stores them and its answers are blackholed, so
    its dedupe keys for group 1's seqs stay; then group 1's process is SIGKILLed."""
    bus.proxy(1, 2).blackhole("backward")
    async with trio.open_nursery() as nursery, bus.connect(1, "OUT") as sender:

        async def put(body: bytes) -> None:
            with contextlib.suppress(MrsError):  # its process is killed under it
                await sender.put(body, target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)

        for body in bodies:
            nursery.start_soon(put, body)
        with trio.fail_after(WAIT_S):
            while await _dqf_messages(bus, 2) < len(bodies):
                await trio.sleep(0.02)
        await trio.to_thread.run_sync(bus.processes[1].kill)
    bus.proxy(1, 2).heal()


async def test_a_second_group_one_on_other_journals_is_refused_until_reset(proc_bus) -> None:
    """Group 1's first process stored five messages in group 2 and died before hearing
    so; a second process serves group 1 from a fresh data directory and takes five
    puts. Before, group 2 took them for resends and dropped them: five acknowledged
    messages lost. Now its link is refused (one line saying what to do) and the five
    wait in its SAF; `mrs admin reset-link` is refused while a link is up, and once
    run on a down link lets them in: all ten arrive. The second process counts its
    seqs from the first's start (`_counting_from_the_first`): its five came under the seqs
    of the first five, still held, and overwrote their records (lost at group 2's
    next restart, SIGKILL here).
    They now wait in group 1's SAF until the first five are confirmed."""
    config = str(proc_bus.config_path)
    up = run_mrs("admin", "reset-link", "1", "--config", config, "--group", "2")
    assert up.returncode == 1 and "is up" in up.stderr, up.stderr
    first = [b"first %d" % index for index in range(5)]
    await _store_unanswered(proc_bus, first)

    proc_bus.processes[1] = _second_group_one(proc_bus)
    _counting_from_the_first(proc_bus)
    await trio.to_thread.run_sync(proc_bus.processes[1].start)
    second = [b"second %d" % index for index in range(5)]
    async with proc_bus.connect(1, "OUT") as sender:
        for body in second:
            psb = await sender.put(body, target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
            assert psb.delivery_status == Status.STORED
    refusal = await _logged(proc_bus, 2, r"refused link: group 1's journals")
    assert f"mrs admin reset-link 1 --config {config} --group 2" in refusal
    link = await wait_for_link(proc_bus, 1, 2, "down", backlog=5)
    assert link["saf_backlog"] == 5
    assert await _dqf_messages(proc_bus, 2) == 5

    reset = run_mrs("admin", "reset-link", "1", "--config", config, "--group", "2")
    assert reset.returncode == 0, reset.stderr
    assert "5 dedupe keys deleted" in reset.stdout
    await wait_for_link(proc_bus, 1, 2, "up")
    await _logged(proc_bus, 2, r"group 1 sent 5 message\(s\) under seqs this group holds")
    await trio.to_thread.run_sync(proc_bus.processes[2].kill)
    await trio.to_thread.run_sync(proc_bus.processes[2].start)
    async with proc_bus.connect(2, "IN") as receiver:
        messages = await drain(receiver, 10)
    assert sorted(message.body for message in messages) == sorted(first + second)
    await wait_for_link(proc_bus, 1, 2, "up", backlog=0)


async def test_a_dialing_group_refuses_a_peer_rebuilt_from_nothing_until_reset(proc_bus) -> None:
    """Group 2's data directory is replaced by an empty one: group 1, which dials it,
    finds other journals in its Welcome, logs one ERROR naming the fix, and keeps
    what it sends in its SAF; reset on group 1, the link comes up and delivers."""
    await trio.to_thread.run_sync(proc_bus.processes[2].kill)
    for path in sorted(proc_bus.data_dir(2).rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    await trio.to_thread.run_sync(proc_bus.processes[2].start)
    async with proc_bus.connect(1, "OUT") as sender:
        psb = await sender.put(b"after", target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
    error = await _logged(proc_bus, 1, r"ERROR.*link to group 2 refused: group 2's journals")
    config = str(proc_bus.config_path)
    assert f"mrs admin reset-link 2 --config {config} --group 1" in error
    assert (await wait_for_link(proc_bus, 1, 2, "down", backlog=1))["saf_backlog"] == 1
    reset = run_mrs("admin", "reset-link", "2", "--config", config, "--group", "1")
    assert reset.returncode == 0, reset.stderr
    await wait_for_link(proc_bus, 1, 2, "up", backlog=0)
    async with proc_bus.connect(2, "IN") as receiver:
        [message] = await drain(receiver, 1)
    assert message.body == b"after"


async def test_a_dialer_of_an_earlier_release_is_answered_in_the_shape_it_reads(
    tmp_path,
) -> None:
    """A group of an earlier release dials with a Hello that says no incarnation and
    refuses a Welcome with more fields than it knows: it is answered with the four
    it reads, and its link is accepted unchecked. Group 2 alone is started, so group
    1's links never brought it an incarnation: once one did, a Hello without one is
    refused (tests/process/test_link_admission_24b.py)."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES)
    await trio.to_thread.run_sync(bus.processes[2].start)
    try:
        await _earlier_dialer_welcomed(bus)
    finally:
        bus.stop()


async def _earlier_dialer_welcomed(bus: LinkedBus) -> None:
    host, port = bus.address(2).rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)
    await stream.send_all(wire.Connection("client").send(hello))
    data = b""
    with trio.fail_after(WAIT_S):
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            data += await stream.receive_some(65536)
    welcome = msgspec.msgpack.decode(data[4 : 4 + int.from_bytes(data[:4], "big")])
    assert welcome[:3] == [2, wire.PROTOCOL_VERSION, 2] and len(welcome) == 5
    async with bus.connect(2, None) as client:
        assert (await client.status())["links"]["1"]["state"] == "up"  # adopted
    await stream.aclose()
