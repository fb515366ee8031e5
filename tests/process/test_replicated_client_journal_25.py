"""A client with its own SAF journal (docs/client-saf.md) against a replicated group
(docs/replication.md), with a real etcd, three real `mrs serve --instance`
processes and real SIGKILLs.

The journal is bound at its first Welcome to the group id and the group's journals'
incarnation (`ClientJournal.check_home`). The incarnation is the replicated journals',
not an instance's: every instance answers the same one once active, so a failover, the
old active's return as a replica and a planned switch-over (`mrs failover`) all drain
the journal on into the new active, while a group rebuilt on the same addresses (other
journals) is refused with JOURNAL_FAIL and gets nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio

from clients import (
    Client,
    DeliveryMode,
    JournalFailed,
    MrsError,
    Status,
    connect,
    instance_addresses,
)
from mrs import protocol as wire
from sim.etcd import wait_active
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config
from tests.process.test_replication import wait_in_sync

__all__ = ["etcd"]  # the fixture, used by name

FAILOVER_S_MAX = 30.0
JOURNALED = 15
"""Puts answered JOURNAL_ON (STORED in the client's journal) while no instance answers."""
WAIT_S = 10.0


def _start(config: Path) -> dict[str, InstanceProcess]:
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    return processes


@pytest.fixture
def instances(etcd, tmp_path) -> Iterator[dict[str, InstanceProcess]]:
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    named = config.rename(config.with_name(f"bus_{tmp_path.name}.toml"))
    processes = _start(named)
    yield processes
    for process in processes.values():
        process.terminate()


async def welcome_incarnation(address: str) -> bytes:
    """The incarnation the instance at `address` tells a client with a SAF journal
    (a Hello that says a journal id), read from its Welcome on a raw connection."""
    host, port = address.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    try:
        hello = wire.Hello(wire.PROTOCOL_VERSION, "probe", "app", 0, True, b"probe-journal")
        await stream.send_all(wire.Connection("client").send(hello))
        data = b""
        with trio.fail_after(WAIT_S):
            while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                data += await stream.receive_some(65536)
    finally:
        await stream.aclose()
    welcome = msgspec.msgpack.decode(data[4 : 4 + int.from_bytes(data[:4], "big")])
    assert welcome[0] == 2, welcome  # Welcome's tag
    return bytes(welcome[5]) if len(welcome) > 5 else b""


async def durable_incarnation(address: str) -> bytes:
    """The active's incarnation once it says one (b"" until it is on a majority)."""
    with trio.fail_after(FAILOVER_S_MAX):
        while not (incarnation := await welcome_incarnation(address)):
            await trio.sleep(0.1)
    return incarnation


async def put_numbered(
    client: Client, prefix: bytes, first: int, count: int, padding: bytes = b""
) -> list[Status]:
    """Puts `<prefix><n><padding>` to ORDERS (WF_DQF) for n in first..first+count;
    their statuses."""
    statuses: list[Status] = []
    for n in range(first, first + count):
        body = b"%s%d%s" % (prefix, n, padding)
        psb = await client.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)
        assert psb.delivery_status == Status.STORED, psb
        statuses.append(Status(psb.status))
    return statuses


async def take_all(addresses: list[str]) -> list[bytes]:
    """Get and confirm ORDERS until empty; none comes POSSDUPL (none was handed out)."""
    bodies: list[bytes] = []
    async with connect(addresses, "ORDERS") as reader:
        while True:
            try:
                message = await reader.get(timeout=2)
            except MrsError:
                return bodies
            assert message.delivery_status != Status.POSSDUPL, message
            bodies.append(message.body)
            await reader.confirm(message.seq)


async def wait_link_up(client: Client) -> None:
    """LINK_UP, never JOURNAL_FAIL on the way (a JournalMismatch raises here)."""
    with trio.fail_after(FAILOVER_S_MAX):
        await client.wait_journal_status(Status.LINK_UP)
    assert client.journal_status == Status.LINK_UP
    assert client.journal_backlog == 0


def test_every_instance_answers_the_replicated_journals_one_incarnation_and_a_journal_drains_on(
    instances, tmp_path
) -> None:
    """Bound to the active a, the journal goes on draining through (1) a SIGKILL of
    the active: puts made while no instance answers are journaled (JOURNAL_ON, STORED)
    and drain into the new active, never JOURNAL_FAIL; (2) the old active back as a
    replica and (3) a planned switch-over back to it (`mrs failover --to`) while a
    task puts. Each active's Welcome says the one incarnation the journal was bound
    to; every put answered is on ORDERS once, in order, none POSSDUPL."""
    first = wait_active(instances, 30)
    config = instances[first].config_path
    addresses = instance_addresses(config, "NYC")

    async def scenario() -> tuple[dict[str, bytes], bytes, list[Status], int]:
        seen: dict[str, bytes] = {first: await durable_incarnation(instances[first].address)}
        journal = tmp_path / "client.saf"
        async with connect(addresses, "SENDER", saf_journal=journal, reconnect=FAST) as client:
            await wait_link_up(client)
            await wait_in_sync(client, {"a", "b", "c"})
            statuses = await put_numbered(client, b"p", 0, 10)
            instances[first].kill()
            with trio.fail_after(WAIT_S):
                await client.wait_journal_status(Status.JOURNAL_ON)
            statuses += await put_numbered(client, b"p", 10, JOURNALED)
            others = {name: p for name, p in instances.items() if name != first}
            second = await trio.to_thread.run_sync(wait_active, others, FAILOVER_S_MAX)
            await wait_link_up(client)
            seen[second] = await durable_incarnation(instances[second].address)
            statuses += await put_numbered(client, b"p", 10 + JOURNALED, 10)
            instances[first].start()  # back, as a replica
            await trio.to_thread.run_sync(instances[first].wait_for, "REPLICA")
            await wait_in_sync(client, {"a", "b", "c"})
            count = 20 + JOURNALED + await _switch_over_while_putting(client, config, first)
            await trio.to_thread.run_sync(wait_active, {first: instances[first]}, FAILOVER_S_MAX)
            await wait_link_up(client)
            seen[f"{first} again"] = await durable_incarnation(instances[first].address)
            statuses += await put_numbered(client, b"p", count, 5)
            home = client._journal.home if client._journal is not None else (0, b"")
        assert home[0] == 1
        return seen, home[1], statuses, count + 5

    seen, home, statuses, count = trio.run(scenario)
    assert len(set(seen.values())) == 1 and home in seen.values(), (seen, home)
    assert statuses[10 : 10 + JOURNALED] == [Status.JOURNAL_ON] * JOURNALED
    assert trio.run(take_all, addresses) == [b"p%d" % n for n in range(count)]


async def _switch_over_while_putting(client: Client, config: Path, to: str) -> int:
    """`mrs failover --to` while a task puts `p<n>` (numbered on from 20 + JOURNALED);
    how many it put (each answered SUCCESS, or JOURNAL_ON and STORED)."""
    put = 0
    stop = trio.Event()

    async def putter() -> None:
        nonlocal put
        while not stop.is_set():
            status = (await put_numbered(client, b"p", 20 + JOURNALED + put, 1))[0]
            assert status in (Status.SUCCESS, Status.JOURNAL_ON), status
            put += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(putter)
        switched = await trio.to_thread.run_sync(
            lambda: run_mrs("failover", "--config", str(config), "NYC", "--to", to)
        )
        assert switched.returncode == 0, switched.stderr
        assert f"-> {to}" in switched.stdout, switched.stdout
        done = put
        while put < done + 5:  # a few more through the new active before stopping
            await trio.sleep(0.05)
        stop.set()
    return put


def _rebuilt(config: Path) -> dict[str, InstanceProcess]:
    """Group 1 (NYC) rebuilt at the same addresses: new data directories (other
    journals, another incarnation) and its own key prefix in etcd; started."""
    directory = config.parent / "rebuilt"
    directory.mkdir()
    text = config.read_text().replace('prefix = "/mrs/', 'prefix = "/mrs/rebuilt-')
    rebuilt = directory / config.name
    rebuilt.write_text(text)
    return _start(rebuilt)


async def _journal_while_down(addresses: list[str], journal: Path, first: int) -> None:
    """Three puts `q<n>` journaled by a client that reaches no instance."""
    async with connect(addresses, "SENDER", saf_journal=journal, connect_timeout_s=1) as client:
        assert client.attach_status == Status.JOURNAL_ON
        statuses = await put_numbered(client, b"q", first, 3)
        assert statuses == [Status.JOURNAL_ON] * 3


def test_a_whole_group_back_drains_the_journal_and_a_rebuilt_one_is_refused(
    instances, tmp_path
) -> None:
    """Every instance SIGKILLed: puts are journaled (JOURNAL_ON, STORED) and drain
    into the group once its instances are back on their journals (same incarnation).
    Then the group is rebuilt at the same addresses from empty data directories: a
    journal holding records bound to the old journals is refused at connect
    (JournalFailed, JOURNAL_FAIL, "other journals"), the rebuilt group gets nothing,
    and the records stay in the journal."""
    first_active = instances[wait_active(instances, 30)]
    config = instances["a"].config_path
    addresses = instance_addresses(config, "NYC")
    journal = tmp_path / "client.saf"

    async def through_a_whole_restart() -> list[Status]:
        # The journal binds to the incarnation the Welcome says: a new group's active
        # says none until its journals' incarnation is on a majority, and a journal
        # bound then knows only the group id (documented: docs/client-saf.md), which a
        # rebuilt group with the same id would pass. In CI the connect came first.
        await durable_incarnation(first_active.address)
        async with connect(addresses, "SENDER", saf_journal=journal, reconnect=FAST) as client:
            await wait_link_up(client)
            statuses = await put_numbered(client, b"q", 0, 3)
            for process in instances.values():
                process.kill()
            with trio.fail_after(WAIT_S):
                await client.wait_journal_status(Status.JOURNAL_ON)
            statuses += await put_numbered(client, b"q", 3, JOURNALED)
            for process in instances.values():
                process.start()
            await trio.to_thread.run_sync(wait_active, instances, FAILOVER_S_MAX)
            await wait_link_up(client)
        return statuses

    statuses = trio.run(through_a_whole_restart)
    assert statuses == [Status.SUCCESS] * 3 + [Status.JOURNAL_ON] * JOURNALED
    count = 3 + JOURNALED
    assert trio.run(take_all, addresses) == [b"q%d" % n for n in range(count)]
    for process in instances.values():
        process.kill()
    trio.run(_journal_while_down, addresses, journal, count)
    rebuilt = _rebuilt(config)
    try:
        active = rebuilt[wait_active(rebuilt, 30)]
        trio.run(_refused, addresses, active.address, journal)
        assert trio.run(take_all, addresses) == []
    finally:
        for process in rebuilt.values():
            process.terminate()


async def _refused(addresses: list[str], active: str, journal: Path) -> None:
    """The journal is refused by the group at `addresses` with its three records kept."""
    await durable_incarnation(active)  # an incarnation to compare: on a majority
    with pytest.raises(JournalFailed, match="other journals") as refused:
        async with connect(addresses, "SENDER", saf_journal=journal):
            pass
    assert refused.value.status == Status.JOURNAL_FAIL
    assert "3 record(s) waiting" in str(refused.value)


TASKS = 4
BACKLOG_PER_TASK = 150
"""Records each task journals while no instance answers: a backlog whose drain the
test cuts with a SIGKILL of the active it drains into."""
PADDING = b"|" + b"." * 32 * 1024
"""Each backlog body's tail: the drain's window (CLIENT_DRAIN_BYTES_MAX) then holds a
few hundred records, so the drain takes several windows and a kill can cut it."""


async def _journal_backlog(client: Client) -> None:
    """TASKS tasks each journal `t<task>:<n>` for n < BACKLOG_PER_TASK, in order."""

    async def task(number: int) -> None:
        statuses = await put_numbered(client, b"t%d:" % number, 0, BACKLOG_PER_TASK, PADDING)
        assert set(statuses) == {Status.JOURNAL_ON}, statuses

    async with trio.open_nursery() as nursery:
        for number in range(TASKS):
            nursery.start_soon(task, number)


async def _kill_mid_drain(client: Client, others: dict[str, InstanceProcess]) -> tuple[str, int]:
    """SIGKILL the one of `others` that took over, once the client drained part of its
    journal into it; its name and the backlog left then (0: the drain ended first)."""
    total = client.journal_backlog
    with trio.fail_after(FAILOVER_S_MAX):
        while client.journal_backlog == total:
            await trio.sleep(0.001)
    left = client.journal_backlog
    second = wait_active(others, 1.0)  # its READY came before it answered anything
    others[second].kill()
    return second, left


def test_a_kill_of_the_active_in_the_middle_of_a_drain_loses_and_doubles_nothing(
    instances, tmp_path
) -> None:
    """The active a is SIGKILLed and the client journals a backlog while no instance
    answers; the journal drains into the new active b, and b is SIGKILLed in the
    middle of that drain (records stored by b and answered to nobody, records in
    flight); a comes back: the drain goes on into the next active, never
    JOURNAL_FAIL, and every journaled put is on ORDERS once, each task's in order,
    none POSSDUPL (none was handed out)."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances[first].config_path, "NYC")

    async def scenario() -> int:
        journal = tmp_path / "client.saf"
        async with connect(addresses, "SENDER", saf_journal=journal, reconnect=FAST) as client:
            await wait_link_up(client)
            await wait_in_sync(client, {"a", "b", "c"})
            instances[first].kill()
            with trio.fail_after(WAIT_S):
                await client.wait_journal_status(Status.JOURNAL_ON)
            await _journal_backlog(client)
            others = {name: p for name, p in instances.items() if name != first}
            second, left = await _kill_mid_drain(client, others)
            instances[first].start()  # back: with the third, a majority again
            rest = {name: p for name, p in instances.items() if name != second}
            await trio.to_thread.run_sync(wait_active, rest, FAILOVER_S_MAX)
            await wait_link_up(client)
        return left

    left = trio.run(scenario)
    assert left > 0, "the drain ended before the kill: nothing was probed"
    bodies = [body.split(b"|")[0] for body in trio.run(take_all, addresses)]
    expected = [b"t%d:%d" % (task, n) for task in range(TASKS) for n in range(BACKLOG_PER_TASK)]
    assert sorted(bodies) == sorted(expected)
    for task in range(TASKS):
        mine = [body for body in bodies if body.startswith(b"t%d:" % task)]
        assert mine == [b"t%d:%d" % (task, n) for n in range(BACKLOG_PER_TASK)]


def _unreplicated_first(config: Path) -> GroupProcess:
    """Group 1 (NYC) as one plain `mrs serve` on instance a's listen address and data
    directory, before the group is made replicated (docs/replication.md, "a group made
    replicated later starts an instance on its old directory")."""
    listen = instance_addresses(config, "NYC")[0]
    coordinator = config.read_text().split("[[group]]")[0]  # the same coordinator key
    plain = config.parent / "plain.toml"
    plain.write_text(
        f'{coordinator}[[group]]\nid = 1\nname = "NYC"\nlisten = "{listen}"\n'
        f'data_dir = "a"\n{STANDARD_QUEUES}'
    )
    return GroupProcess(plain, 1)


def test_a_journal_bound_before_the_group_was_made_replicated_drains_into_it(
    etcd, tmp_path
) -> None:
    """A journal bound to group 1 served by one plain `mrs serve`, records journaled
    while it is down; the group is then made replicated (instance a on the old data
    directory, b and c new): the journal drains into its active, and on into the
    next one after a SIGKILL; every put is on ORDERS once, in order."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    addresses = instance_addresses(config, "NYC")
    journal = tmp_path / "client.saf"
    plain = _unreplicated_first(config)
    plain.start()

    async def bound_then_down() -> None:
        async with connect(addresses, "SENDER", saf_journal=journal, reconnect=FAST) as client:
            await wait_link_up(client)
            assert await put_numbered(client, b"u", 0, 3) == [Status.SUCCESS] * 3
            plain.kill()
            with trio.fail_after(WAIT_S):
                await client.wait_journal_status(Status.JOURNAL_ON)
            assert await put_numbered(client, b"u", 3, 3) == [Status.JOURNAL_ON] * 3

    trio.run(bound_then_down)
    processes = _start(config)
    try:
        first = wait_active(processes, 60)
        others = {name: p for name, p in processes.items() if name != first}

        async def drains_on() -> None:
            async with connect(addresses, "SENDER", saf_journal=journal, reconnect=FAST) as q:
                await wait_link_up(q)
                await wait_in_sync(q, {"a", "b", "c"})
                processes[first].kill()
                with trio.fail_after(WAIT_S):
                    await q.wait_journal_status(Status.JOURNAL_ON)
                assert await put_numbered(q, b"u", 6, 3) == [Status.JOURNAL_ON] * 3
                await trio.to_thread.run_sync(wait_active, others, FAILOVER_S_MAX)
                await wait_link_up(q)
                assert await put_numbered(q, b"u", 9, 3) == [Status.SUCCESS] * 3

        trio.run(drains_on)
        assert trio.run(take_all, addresses) == [b"u%d" % n for n in range(12)]
    finally:
        for process in processes.values():
            process.terminate()
