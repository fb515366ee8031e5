"""Probes of the client SAF journal with real processes: a producer that never pauses
between puts, against a plain group that comes back and against a replicated group
whose active is SIGKILLed.

What they hold the client to: once the group answers again, the journal drains and
the client reaches LINK_UP while the application keeps putting (before, each put
journaled behind the backlog kept a record in the journal at every moment, so it
never emptied: JOURNAL_ON for as long as the application put, and
`wait_journal_status(LINK_UP)` never returned), and every put answered (SUCCESS, or
JOURNAL_ON and STORED) is delivered once, in order, on an in-order queue.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

from clients import Client, MrsError, Status, connect, instance_addresses
from sim.etcd import wait_active
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import FixedPortServer
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config

__all__ = ["etcd"]  # the fixture, used by name

LINK_UP_WAIT_S = 10.0
"""The drain of a few hundred records takes well under a second; before the fix the
status never came."""
FAILOVER_S_MAX = 15.0


class Producer:
    """One task putting `<prefix><n>` to ORDERS (in order) as fast as each put is
    answered."""

    def __init__(self, client: Client, prefix: bytes = b"p", limit: int | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.limit = limit
        """Stop after this many puts (None: when told)."""
        self.answered = 0
        self.statuses: dict[str, int] = {}
        self.stop = trio.Event()
        self.journaled = trio.Semaphore(0)

    async def run(self) -> None:
        while not self.stop.is_set() and self.answered != self.limit:
            psb = await self.client.put(b"%s%d" % (self.prefix, self.answered), "ORDERS")
            assert psb.status in (Status.SUCCESS, Status.JOURNAL_ON), psb
            name = Status(psb.status).name
            self.statuses[name] = self.statuses.get(name, 0) + 1
            self.answered += 1
            if psb.status == Status.JOURNAL_ON:
                self.journaled.release()


async def _until_link_up_while_putting(*producers: Producer) -> None:
    """LINK_UP while the producers keep putting, then a few of their puts go straight on."""
    with trio.fail_after(LINK_UP_WAIT_S):
        await producers[0].client.wait_journal_status(Status.LINK_UP)
    for producer in producers:
        straight = producer.statuses.get("SUCCESS", 0)
        with trio.fail_after(LINK_UP_WAIT_S):
            while producer.statuses.get("SUCCESS", 0) < straight + 20:
                await trio.sleep(0.01)
    for producer in producers:
        producer.stop.set()


async def _bodies(client: Client) -> list[bytes]:
    """Get and confirm ORDERS until it is empty; the bodies in delivery order."""
    bodies: list[bytes] = []
    while True:
        try:
            messages = await client.get_many(500, timeout=2)
        except MrsError:
            return bodies
        bodies.extend(message.body for message in messages)
        for result in await client.confirm_many([message.seq for message in messages]):
            assert result is None, result


@pytest.fixture
def server(tmp_path) -> Iterator[FixedPortServer]:
    server = FixedPortServer(tmp_path / "bus")
    yield server
    server.stop()


def test_a_producer_that_never_pauses_reaches_link_up_when_the_group_is_back(
    server, tmp_path
) -> None:
    """The group is SIGKILLed; a task keeps putting back to back (journaled); the group
    restarts: the client drains and reaches LINK_UP while the task puts, and every
    answered put is on ORDERS once, in order."""
    address = server.start()

    async def scenario() -> tuple[int, list[bytes]]:
        async with connect(address, "SENDER", saf_journal=tmp_path / "c.saf", reconnect=FAST) as q:
            assert q.journal_status == Status.LINK_UP
            server.kill()
            await q.wait_journal_status(Status.JOURNAL_ON)
            producer = Producer(q)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(producer.run)
                for _ in range(200):  # a backlog to drain
                    await producer.journaled.acquire()
                await trio.to_thread.run_sync(server.start)
                await _until_link_up_while_putting(producer)
            assert q.journal_backlog == 0
        async with connect(address, "ORDERS") as reader:
            return producer.answered, await _bodies(reader)

    answered, bodies = trio.run(scenario)
    assert bodies == [b"p%d" % n for n in range(answered)]


def test_a_put_loop_on_a_journaling_client_ends_when_its_scope_is_cancelled(
    server, tmp_path
) -> None:
    """A task putting in a loop while the group is down (every put journaled) inside
    `move_on_after`: the scope ends it, and the journal holds exactly the puts that
    were answered. Before, a journaled put waited for its commit shielded and had no
    other cancel point, so the loop never saw the cancellation (a nursery around
    such a producer could never be torn down)."""
    puts_max = 20_000  # at about 0.3 ms each, far longer than the scope

    async def scenario() -> tuple[bool, int, int]:
        journal = tmp_path / "c.saf"
        async with connect(server.address, "SENDER", saf_journal=journal, reconnect=FAST) as q:
            assert q.attach_status == Status.JOURNAL_ON  # the group was never started
            answered = 0
            with trio.move_on_after(0.3) as scope:
                while answered < puts_max:
                    psb = await q.put(b"%d" % answered, "ORDERS")
                    assert (psb.status, psb.delivery_status) == (Status.JOURNAL_ON, Status.STORED)
                    answered += 1
            return scope.cancelled_caught, answered, q.journal_backlog

    cancelled, answered, backlog = trio.run(scenario)
    assert cancelled and answered < puts_max
    assert backlog == answered


@pytest.fixture
def instances(etcd, tmp_path) -> Iterator[dict[str, InstanceProcess]]:
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    named = config.with_name(f"bus_{tmp_path.name}.toml")  # its own key prefix in etcd
    config.rename(named)
    processes = {name: InstanceProcess(named, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    yield processes
    for process in processes.values():
        process.terminate()


def test_a_producer_that_never_pauses_reaches_link_up_after_a_kill_of_the_active(
    instances, tmp_path
) -> None:
    """SIGKILL the active while a task puts back to back through a client with a SAF
    journal: its puts are journaled while no instance answers, the journal drains to
    the new active and the client reaches LINK_UP while the task goes on putting;
    every answered put is on ORDERS once, in order."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def scenario() -> tuple[list[Producer], list[bytes]]:
        journal = tmp_path / "c.saf"
        async with connect(addresses, "SENDER", saf_journal=journal, reconnect=FAST) as q:
            await q.wait_journal_status(Status.LINK_UP)
            before, during = Producer(q, b"a"), Producer(q, b"b", limit=300)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(before.run)
                while before.answered < 50:
                    await trio.sleep(0.01)
                instances[first].kill()  # `before`'s put in flight waits to be re-sent
                with trio.fail_after(10):
                    await q.wait_journal_status(Status.JOURNAL_ON)
                nursery.start_soon(during.run)  # a backlog, journaled while no instance answers
                others = {n: p for n, p in instances.items() if n != first}
                await trio.to_thread.run_sync(wait_active, others, FAILOVER_S_MAX)
                await _until_link_up_while_putting(before)
            assert before.statuses.get("JOURNAL_ON", 0) > 0, before.statuses  # behind `during`'s
            assert q.journal_backlog == 0
        async with connect(addresses, "ORDERS") as reader:
            return [before, during], await _bodies(reader)

    producers, bodies = trio.run(scenario)
    for producer in producers:
        mine = [body for body in bodies if body.startswith(producer.prefix)]
        assert mine == [b"%s%d" % (producer.prefix, n) for n in range(producer.answered)]
    assert len(bodies) == sum(producer.answered for producer in producers)
