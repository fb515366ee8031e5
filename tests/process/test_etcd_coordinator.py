"""The etcd coordinator against a real etcd: one winner per term, the in-sync record
written only by the holder of the term, and a lost lease lets another win a higher
term (what a SIGKILLed active leaves behind)."""

from __future__ import annotations

import trio

from mrs.config.bus import load_config
from mrs.replication.coordinator import (
    CoordinatorUnavailable,
    EtcdCoordinator,
    FailoverRequest,
    etcd_prefix,
    may_campaign,
)
from mrs.replication.etcd import EtcdClient, put_op
from sim.ports import free_port
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import etcd, write_replicated_config

__all__ = ["etcd"]  # the fixture, used by name

TTL_S = 2


def coordinators(endpoint: str, prefix: str) -> list[EtcdCoordinator]:
    return [EtcdCoordinator(EtcdClient([endpoint]), prefix, name, TTL_S) for name in "abc"]


async def test_one_winner_then_a_higher_term_after_the_lease_is_lost(etcd) -> None:
    a, b, c = coordinators(etcd.endpoint, "/mrs/test/lease-loss")
    try:
        state = await b.read()
        assert state.leader is None and state.in_sync is None
        assert await a.campaign() == 1
        assert await b.campaign() is None
        assert await a.renew()
        assert await a.set_in_sync(1, ("a", "b", "c"), 1)
        assert not await b.set_in_sync(1, ("b", "c"), 1)  # not the holder of term 1
        state = await c.read()
        assert (state.leader, state.term, state.in_sync) == ("a", 1, ("a", "b", "c"))
        assert (state.sync_leader, state.acks_needed) == ("a", 1)
        # a stops renewing (as if SIGKILLed): etcd drops its key once the TTL runs out
        with trio.fail_after(TTL_S * 5):
            while (state := await c.read()).leader is not None:
                await trio.sleep(0.1)
        assert not may_campaign(state, "b")  # c may hold an answer b lacks: positions first
        await b.post_position(1, (1, 7))
        await c.post_position(1, (1, 9))
        state = await b.read()
        assert state.positions == {"b": (1, 7), "c": (1, 9)}
        assert may_campaign(state, "c") and not may_campaign(state, "b")
        assert await c.campaign() == 2
        assert not await a.renew()  # the old lease is gone for good
        assert not await a.set_in_sync(1, ("a",), 1)  # an old term writes nothing
        assert (await b.read()).in_sync == ("c",)
    finally:
        for coordinator in (a, b, c):
            await coordinator.aclose()


async def test_resign_frees_the_leadership_at_once(etcd) -> None:
    a, b, _ = coordinators(etcd.endpoint, "/mrs/test/resign")
    try:
        assert await a.campaign() == 1
        await a.resign()
        assert (await b.read()).leader is None
        assert await b.campaign() == 2
    finally:
        await a.aclose()
        await b.aclose()


async def test_endpoints_are_tried_in_turn(etcd) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client = EtcdClient([dead, etcd.endpoint])
    coordinator = EtcdCoordinator(client, "/mrs/test/endpoints", "a", TTL_S)
    try:
        assert (await coordinator.read()).leader is None
        assert client.endpoints[0] == etcd.endpoint  # the one that answered goes first
    finally:
        await coordinator.aclose()
    unreachable = EtcdCoordinator(EtcdClient([dead]), "/mrs/test/endpoints", "a", TTL_S)
    try:
        try:
            await unreachable.read()
        except CoordinatorUnavailable as error:
            assert "unreachable" in str(error)
        else:
            raise AssertionError("read from a dead endpoint succeeded")
    finally:
        await unreachable.aclose()


async def test_a_position_that_is_not_one_counts_as_not_posted(etcd) -> None:
    """A value written into etcd by hand under position/<name>: no candidate is chosen
    on it, and reading the state does not fail."""
    a, b, c = coordinators(etcd.endpoint, "/mrs/test/bad-position")
    try:
        assert await a.campaign() == 1
        assert await a.set_in_sync(1, ("a", "b", "c"), 1)
        await a.resign()
        await b.post_position(1, (1, 4))
        await c.client.txn([], [put_op(b"/mrs/test/bad-position/position/c", b"not json")])
        state = await b.read()
        assert state.positions == {"b": (1, 4)}
        assert not may_campaign(state, "b")  # c's position is still needed
    finally:
        for coordinator in (a, b, c):
            await coordinator.aclose()


async def test_a_read_of_several_keys_sees_them_at_one_revision(etcd) -> None:
    """`get_many` (how the coordinator reads the leader, term and in-sync record): a
    writer changes two keys together in each transaction, and every read of both,
    made while it writes, sees them equal. (Read one key after the other, the two
    were seen apart: a new term beside an old leader.)"""
    client = EtcdClient([etcd.endpoint])
    x, y = b"/mrs/test/snapshot/x", b"/mrs/test/snapshot/y"
    writes = 150
    seen: list[tuple[bytes, bytes]] = []
    try:
        assert await client.get_many([x, y]) == [None, None]

        async def writer() -> None:
            for index in range(writes):
                value = b"%d" % index
                await client.txn([], [put_op(x, value), put_op(y, value)])

        async def reader(done: trio.Event) -> None:
            while not done.is_set():
                both = await client.get_many([x, y])
                if both[0] is not None and both[1] is not None:
                    seen.append((both[0][0], both[1][0]))
                await trio.sleep(0)

        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader, done)
            await writer()
            done.set()
        assert len({value for value, _ in seen}) > 10  # the reads went along with the writes
        assert all(a == b for a, b in seen), [pair for pair in seen if pair[0] != pair[1]][:3]
        last = await client.get_many([x, y, b"/mrs/test/snapshot/absent"])
        assert [found[0] if found else None for found in last] == [b"149", b"149", None]
    finally:
        await client.aclose()


async def test_a_second_failover_command_does_not_replace_the_first(etcd, tmp_path) -> None:
    """Two `mrs failover` at once: the second replaced the first's request, and both
    commands printed the one switch that happened with exit 0 (a `--to c` racing a
    `--to b` said `NYC: a -> b`). The second is now refused in one line while the
    first stands, and the first is left as it was."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    prefix = etcd_prefix(load_config(config).coordinator.prefix, 1)
    active, operator = coordinators(etcd.endpoint, prefix)[:2]
    try:
        assert await active.campaign() == 1
        assert await active.set_in_sync(1, ("a", "b", "c"), 1)
        first = FailoverRequest("b", "first")
        assert await operator.request_failover(first)
        assert not await operator.request_failover(FailoverRequest("c", "second"))

        second = await trio.to_thread.run_sync(
            lambda: run_mrs("failover", "--config", str(config), "NYC", "--to", "c")
        )
        assert second.returncode == 1, second.stderr
        assert second.stderr.strip().splitlines() == [
            f"mrs: NYC: another failover to b is under way; ask again once it is "
            f"over (mrs status --config {config})"
        ]
        assert await active.failover_requested() == first
    finally:
        await active.aclose()
        await operator.aclose()
