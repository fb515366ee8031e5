"""A planned switch-over nobody takes, with real etcd and three real `mrs serve
--instance` processes (thirty-fourth session).

What it proves: `mrs failover NYC` (no `--to`) while no replica could serve clients
(each one's client port held by another process, so each is no candidate) ends with
exit 1 saying the old active is active again, once it took its term back after
REPLICATION_HANDOVER_FALLBACK_S. Before, it printed `NYC: a -> a (term 2) in 10.9 s`
with exit 0, a switch that never happened, and an operator could go on to stop the
instance still active. The test waits out that fallback (10 s): it is the one event
the command reports.
"""

from __future__ import annotations

import socket
from pathlib import Path

import trio

from clients import connect, instance_addresses
from mrs.config.bus import load_config
from mrs.limits import REPLICATION_HANDOVER_FALLBACK_S
from sim.etcd import wait_active
from tests.cli_helpers import run_mrs
from tests.etcd_helpers import InstanceProcess, etcd
from tests.process.test_replicated_ops_33 import replicated
from tests.process.test_replication import wait_in_sync

__all__ = ["etcd", "replicated"]  # the fixtures, used by name

WAIT_S = 30.0


def test_a_hand_over_nobody_takes_is_not_reported_as_a_switch(
    replicated: tuple[Path, dict[str, InstanceProcess]],
) -> None:
    """Both replicas in sync, their client ports held: the active hands over, nobody
    takes the term, and the active takes it back. `mrs failover` says so in one line,
    exit 1, and the same instance answers clients in the newer term."""
    config, processes = replicated
    first = wait_active(processes, WAIT_S)
    addresses = instance_addresses(config, "NYC")

    async def all_in_sync() -> int:
        async with connect(addresses, None) as client:
            return (await wait_in_sync(client, set(processes)))["term"]

    term = trio.run(all_in_sync)
    group = load_config(config).groups[1]
    holders = []
    try:
        for name in sorted(set(processes) - {first}):
            host, port = group.instance(name).listen.rsplit(":", 1)
            holder = socket.socket()
            holder.bind((host, int(port)))
            holder.listen()
            holders.append(holder)
        switched = run_mrs("failover", "--config", str(config), "NYC")
    finally:
        for holder in holders:
            holder.close()
    line = switched.stderr.strip()
    assert switched.returncode == 1, (switched.stdout, line)
    assert len(line.splitlines()) == 1 and f"{first} -> {first}" not in switched.stdout
    fallback = f"{REPLICATION_HANDOVER_FALLBACK_S:g} s"
    assert f"NYC: {first} is active again (term " in line, line
    assert f"no replica took over within {fallback}" in line, line

    async def still_first() -> None:
        async with connect(addresses, None) as client:
            status = (await client.status())["replication"]
            assert (status["instance"], status["term"] > term) == (first, True), status

    trio.run(still_first)
