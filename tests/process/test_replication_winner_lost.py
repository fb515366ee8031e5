"""A new active lost before any replica joined its term, as real processes: a real
etcd, three `mrs serve --instance` processes, and a proxy on every replication link
(sim.replicated_nemesis `ReplicatedBus`).

The active is SIGKILLed in a group in sync (every replica holds every record), with
the link between the two replicas cut, so the winner of the next term cannot bring
the other one in; the winner is SIGKILLed too. The first active comes back. The
other replica takes over, because the winner's first in-sync record in etcd named it
(it held every record the winner held, and the winner answered nothing before a
replica joined): every answered put is there, once, in order. Before, that record
named the winner alone, and the group waited for the lost winner to come back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from clients import connect
from mrs.model import DeliveryMode, Status
from mrs.replication.coordinator import EtcdCoordinator, GroupState, etcd_prefix
from mrs.replication.etcd import EtcdClient
from sim.replicated_nemesis import LEASE_TTL_S, ReplicatedBus, active_status, wait_healthy
from tests.etcd_helpers import skip_without_etcd

pytestmark = pytest.mark.xdist_group("replicated-nemesis")

WAIT_S = 45.0
PUTS = 20


async def _state_until(observer: EtcdCoordinator, wanted, what: str) -> GroupState:
    """etcd's record of the group once `wanted(state)` holds (AssertionError if not
    within WAIT_S, naming `what` and the last state seen)."""
    state = None
    with trio.move_on_after(WAIT_S):
        while True:
            state = await observer.read()
            if wanted(state):
                return state
            await trio.sleep(0.05)
    raise AssertionError(f"no {what} within {WAIT_S} s; etcd holds {state}")


async def _active_with(bus: ReplicatedBus, active: str, joined: str) -> None:
    """Until `active` answers as the active with `joined` connected and in sync."""
    with trio.fail_after(WAIT_S):
        while True:
            status = await active_status(bus)
            if status is not None and status["instance"] == active:
                replica = status["replicas"].get(joined, {})
                if replica.get("in_sync") and replica.get("connected"):
                    return
            await trio.sleep(0.2)


async def _every_replica_holds_everything(bus: ReplicatedBus) -> None:
    """Until the active reports no record unacknowledged by any replica: the one no
    answer waits for gets its records up to REPLICATION_REST_HOLD_S after the answers."""
    with trio.fail_after(WAIT_S):
        while True:
            status = await active_status(bus)
            replicas = (status or {}).get("replicas", {}).values()
            if replicas and all(replica["backlog_records"] == 0 for replica in replicas):
                return
            await trio.sleep(0.01)


async def _scenario(directory: Path) -> None:
    bus = ReplicatedBus(directory)
    await trio.to_thread.run_sync(bus.etcd.start)
    prefix = etcd_prefix(f"/mrs/{directory.name}", 1)
    observer = EtcdCoordinator(EtcdClient([bus.etcd.endpoint]), prefix, "observer", LEASE_TTL_S)
    try:
        async with trio.open_nursery() as nursery:
            await bus.run_proxies(nursery)
            bus.start_missing()
            first = await wait_healthy(bus)
            assert first is not None, "the group did not start"
            async with connect(bus.addresses, "ORDERS") as client:
                for i in range(PUTS):
                    psb = await client.put(b"m%d" % i, "ORDERS", delivery=DeliveryMode.WF_DQF)
                    assert psb.status == Status.SUCCESS
            await _every_replica_holds_everything(bus)
            b, c = (name for name in ("a", "b", "c") if name != first)
            bus.replication_proxies[(b, c)].cut()
            bus.replication_proxies[(c, b)].cut()
            bus.instances[first].kill()
            state = await _state_until(
                observer,
                lambda s: s.leader in (b, c) and s.sync_leader == s.leader and s.acks_needed,
                "in-sync record of the new active naming the other replica",
            )
            winner = state.leader
            other = c if winner == b else b
            assert state.in_sync == tuple(sorted((b, c))) and state.acks_needed == 1, state
            bus.instances[winner].kill()  # before `other` could join its term
            bus.heal()
            bus.instances[first].start()
            await _state_until(observer, lambda s: s.leader == other, f"term won by {other}")
            await _active_with(bus, other, first)
            async with connect(bus.addresses, "ORDERS") as client:
                bodies = []
                for _ in range(PUTS):
                    message = await client.get(timeout=10)
                    assert message.delivery_status != Status.POSSDUPL, message
                    bodies.append(message.body)
                    await client.confirm(message.seq)
            assert bodies == [b"m%d" % i for i in range(PUTS)]  # every answered put, once
            assert bus.instances[winner].process.poll() is not None  # still lost
            nursery.cancel_scope.cancel()
    finally:
        await observer.aclose()
        bus.stop()


def test_a_new_active_lost_before_a_replica_joins_leaves_the_group_a_candidate(
    tmp_path: Path,
) -> None:
    if shutil.which("etcd") is None:
        skip_without_etcd("etcd is not installed")
    trio.run(_scenario, tmp_path)

