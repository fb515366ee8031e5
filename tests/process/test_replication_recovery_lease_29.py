"""A new active whose start outlasts its lease keeps its term (real etcd, real
processes).

Before: the lease granted by the win was not renewed while the promoted instance
recorded its term and recovered its journals (the event loop held), so a start longer
than the TTL (a large DQF on a cold disk, a slow device) let it expire: the new
active stepped down at its first renewal, the other replica won the next term and
started as slowly, and the group went on failing over. Now a thread renews the lease
until the lease loop begins (mrs.replication.lease_keeper). The slow start is the
harness's fault file: each of its commits (the term recorded, the seqs reserved)
flushes 3 s late, with a 2 s lease.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from clients import connect, instance_addresses, put_once
from mrs.replication.coordinator import EtcdCoordinator
from mrs.replication.etcd import EtcdClient
from sim.etcd import wait_active
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config
from tests.process.test_replication import wait_in_sync

__all__ = ["etcd"]  # the fixture, used by name

TTL_S = 2
RECOVERY_S = 3.0
RECOVERED = "recovered"
"""The line a group's recovery ends with (mrs.group.recovery `recover`)."""


def test_the_lease_is_renewed_while_the_event_loop_is_held(etcd, tmp_path: Path) -> None:
    """Renewals from the thread across 1.6 TTLs of blocking work: the lease is still
    held after it, and counted from a renewal made during it."""

    async def scenario() -> None:
        client = EtcdClient([etcd.endpoint])
        coordinator = EtcdCoordinator(client, f"/mrs/{tmp_path.name}/1", "a", TTL_S)
        try:
            assert await coordinator.campaign() == 1
            granted_s = coordinator.lease_sent_s
            coordinator.renew_from_thread()
            time.sleep(1.6 * TTL_S)  # the loop held, as by a recovery
            coordinator.stop_renewing_from_thread()
            assert coordinator.lease_sent_s > granted_s + TTL_S / 2
            assert trio.current_time() - coordinator.lease_sent_s < TTL_S
            assert await coordinator.renew()
            assert (await coordinator.read()).leader == "a"
        finally:
            await client.aclose()

    trio.run(scenario)


def _recoveries(logs: dict[str, Path]) -> dict[str, int]:
    return {name: log.read_text().count(RECOVERED) for name, log in logs.items()}


def test_a_promoted_replica_whose_recovery_outlasts_the_lease_keeps_its_term(
    etcd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES, ttl_s=TTL_S)
    named = config.with_name(f"bus_{tmp_path.name}.toml")  # its own keys in etcd
    config.rename(named)
    fault = tmp_path / "fault"
    monkeypatch.setenv("MRS_FAULT_FILE", str(fault))
    processes = {name: InstanceProcess(named, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    try:
        first = wait_active(processes, 30)
        addresses = instance_addresses(named, "NYC")

        async def before() -> None:
            async with connect(addresses, "ORDERS") as client:
                await wait_in_sync(client, {"a", "b", "c"})
                await put_once(client, b"before", "ORDERS", "before")

        trio.run(before)
        others = {name: p for name, p in processes.items() if name != first}
        logs = {name: tmp_path / f"{name}.log" for name in others}
        seen = _recoveries(logs)
        fault.write_text(f"SLOW {RECOVERY_S}")
        processes[first].kill()
        deadline_s = time.monotonic() + 60
        while _recoveries(logs) == seen:  # the winner's slow recovery ends
            assert time.monotonic() < deadline_s, "no replica recovered within 60 s"
            time.sleep(0.005)
        fault.write_text("")  # its later commits at the disk's pace
        second = wait_active(others, 30)

        async def after() -> dict:
            async with connect(addresses, "ORDERS") as client:
                await put_once(client, b"after", "ORDERS", "after", within_s=30)
                return (await client.status())["replication"]

        status = trio.run(after)
        assert (status["instance"], status["term"]) == (second, 2)
        assert "steps down" not in logs[second].read_text()
    finally:
        for process in processes.values():
            process.terminate()
