"""Probes of a replicated group as its operator runs it at 3 a.m.: real etcd, three
real `mrs serve --instance` processes, real LMDB, instances lost and rebuilt the way
docs/replication.md ("What an operator does") says.

What they prove: in a group that writes nothing (a quiet night), a lost replica
leaves the in-sync set within the lag bound as it does under load, so that when the
active is lost next the replica left takes over with every answered put (before, the
dead replica stayed named in sync for good, and the replica left waited for its
position: the group down though one instance held every answer); and a replica
started again on such a group is in sync again at once, with no write to bring it
back.
"""

from __future__ import annotations

import trio

from clients import MrsError, connect, instance_addresses
from mrs.model import Status
from sim.etcd import wait_active
from tests.etcd_helpers import InstanceProcess, etcd
from tests.process.test_replication import (
    FAILOVER_S_MAX,
    instances,
    wait_caught_up,
    wait_dropped,
    wait_in_sync,
)

__all__ = ["etcd", "instances"]  # the fixtures, used by name

WAIT_S = 30.0
PUTS = 5


async def _drain(addresses: list[str]) -> list[bytes]:
    """Every message of ORDERS, confirmed, in the order delivered."""
    bodies: list[bytes] = []
    async with connect(addresses, "ORDERS") as client:
        while True:
            try:
                message = await client.get(timeout=3)
            except MrsError:
                return bodies
            bodies.append(message.body)
            await client.confirm(message.seq)


def test_a_replica_lost_on_a_quiet_group_leaves_the_set_and_the_other_takes_over(
    instances: dict[str, InstanceProcess],
) -> None:
    """Nothing is written after a few puts. A replica is SIGKILLed: the active stops
    naming it in sync within the lag bound (it used to name it for good). Started
    again, it is in sync again without a write (it used to wait for one). Then the
    other replica and the active are SIGKILLed in turn: the one left takes over
    (the group used to wait for the dead replica), and with one instance started
    again on its disk, every answered put is delivered, once, in order."""
    first = wait_active(instances, WAIT_S)
    lost, left = sorted(name for name in instances if name != first)
    addresses = instance_addresses(instances[first].config_path, "NYC")
    expected = [b"night-%d" % number for number in range(PUTS)]

    async def quiet_night() -> None:
        async with connect(addresses, "SENDER") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            for body in expected:
                assert (await client.put(body, "ORDERS")).status == Status.SUCCESS
            await wait_caught_up(client, {"a", "b", "c"})
            await trio.to_thread.run_sync(instances[lost].kill)
            await wait_dropped(client, lost)  # no record is written from here on
            instances[lost].start()
            await wait_in_sync(client, {lost}, timeout_s=WAIT_S)
            await trio.to_thread.run_sync(instances[left].kill)
            await wait_dropped(client, left)

    trio.run(quiet_night)
    instances[first].kill()
    assert wait_active({lost: instances[lost]}, FAILOVER_S_MAX) == lost
    instances[left].start()  # answers wait for a replica: a majority of the disks
    assert trio.run(_drain, addresses) == expected


def test_a_replica_silent_on_a_quiet_group_leaves_the_set_and_comes_back(
    instances: dict[str, InstanceProcess],
) -> None:
    """A replica that stops answering with its TCP connection kept (SIGSTOP here; a
    machine powered off or a cut that drops packets likewise) on a group that writes
    nothing missed no record and kept its link up: named in sync for good, so that a
    failover after the active's loss would wait for it. Now the active's pings go
    unanswered and it drops it within REPLICATION_SILENT_S_MAX and the lag bound;
    resumed, it is in sync again without a write."""
    from mrs.limits import REPLICATION_LAG_S_MAX, REPLICATION_SILENT_S_MAX

    first = wait_active(instances, WAIT_S)
    silent = sorted(name for name in instances if name != first)[0]
    addresses = instance_addresses(instances[first].config_path, "NYC")

    async def quiet_night() -> None:
        async with connect(addresses, "SENDER") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            assert (await client.put(b"night", "ORDERS")).status == Status.SUCCESS
            await wait_caught_up(client, {"a", "b", "c"})
            instances[silent].pause()
            try:
                with trio.fail_after(REPLICATION_SILENT_S_MAX + 10 * REPLICATION_LAG_S_MAX):
                    while (await client.status())["replication"]["replicas"][silent]["in_sync"]:
                        await trio.sleep(0.2)
            finally:
                instances[silent].resume()
            await wait_in_sync(client, {"a", "b", "c"}, timeout_s=WAIT_S)

    trio.run(quiet_night)
