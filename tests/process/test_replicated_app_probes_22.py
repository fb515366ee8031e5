"""A replicated group as an application sees it across a failover (real etcd, three
`mrs serve --instance` processes, the active SIGKILLed).

What it holds the client to: docs/replication.md says a call made while the client
reconnects to the new active waits for it within its own timeout, "a consumer's loop
is not handed an error for every call of the seconds a failover takes". A plain get
did; a selective get (`get(select=...)`, `get_many(select=...)`), `pending` and
`locate` raised NOTACTIVE at once, in the async client and in the blocking one
(`connect_sync`), so a consumer that selects by correlation id, or checks its queue
depth, spun on that error for the whole failover.
"""

from __future__ import annotations

import time

import pytest
import trio

from clients import BadParameter, Status, connect, connect_sync, instance_addresses
from mrs.core.selection import by_correlation_id
from mrs.model import Address
from sim.etcd import wait_active
from tests.etcd_helpers import etcd
from tests.process.test_replication import instances, wait_in_sync

__all__ = ["etcd", "instances"]  # the fixtures, used by name

FAILOVER_S_MAX = 15.0
"""The new active answers this long after the kill at most (lease 3 s: about 4 s)."""


def test_selective_gets_pending_and_locate_made_during_a_failover_wait_for_the_new_active(
    instances,
) -> None:
    """SIGKILL the active; once the clients saw the loss, and before the new active
    answers, an async client asks `pending`, `locate` and a selective get at once, and
    a blocking client (connect_sync) a selective get_many: each waits for the new
    active and answers there (the messages put before the kill, first deliveries,
    selected by correlation id past an older one); before, each raised NOTACTIVE at
    once. A bad argument is still refused at once, not after the wait."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")
    blocking = connect_sync(addresses, "ANYORDER")  # a thread of its own: made outside trio

    async def scenario() -> dict[str, object]:
        outcomes: dict[str, object] = {}
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            for target in ("ORDERS", "ANYORDER"):
                await client.put(b"older", target, correlation_id=b"other")
                await client.put(b"wanted", target, correlation_id=b"c7")
            await client.put(b"waiting", "SENDER")  # what `pending` counts: no get takes it
            instances[first].kill()
            killed_s = time.monotonic()
            with trio.fail_after(10):
                while client.connected or blocking.connected:
                    await trio.sleep(0.01)
            with pytest.raises(BadParameter):  # a mistake needs no active to be refused
                await client.pending("ORDERS")  # type: ignore[arg-type] - one queue, no list

            async def call(name: str, function, *args) -> None:
                outcomes[name] = await function(*args)
                outcomes[f"{name} s"] = time.monotonic() - killed_s

            selected = by_correlation_id(b"c7")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, "pending", client.pending, ["SENDER"])
                nursery.start_soon(call, "locate", client.locate, "ANYORDER")
                nursery.start_soon(call, "get", client.get, FAILOVER_S_MAX, selected)
                blocking_get = blocking.get_many
                nursery.start_soon(
                    call, "sync", trio.to_thread.run_sync, blocking_get, 5, FAILOVER_S_MAX, selected
                )
            assert (await client.status())["replication"]["instance"] != first
        return outcomes

    try:
        outcomes = trio.run(scenario)
    finally:
        blocking.close()
    assert outcomes["pending"] == [1]
    assert outcomes["locate"] == Address(1, 11)
    got = outcomes["get"]
    assert (got.body, got.delivery_status) == (b"wanted", Status.CONFIRMREQ)  # type: ignore[attr-defined]
    sync_bodies = [(m.body, m.delivery_status) for m in outcomes["sync"]]  # type: ignore[attr-defined]
    assert sync_bodies == [(b"wanted", Status.CONFIRMREQ)]
    for name in ("pending", "locate", "get", "sync"):
        assert outcomes[f"{name} s"] < FAILOVER_S_MAX, outcomes  # type: ignore[operator]
