"""Every instance of a replicated group back with its data directory wiped, etcd
still holding the group's record: real etcd, three real `mrs serve --instance`.

What it proves: each instance, waiting for the others, says that if they hold
nothing too every copy of the journals is gone, and gives the command that starts
the group empty; run as logged, the group starts and serves. Before, each said only
"start b, c" of instances that were running."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import trio

from clients import connect, instance_addresses
from mrs.limits import ELECTION_WAIT_LOG_S
from sim.etcd import wait_active
from tests.etcd_helpers import etcd
from tests.process.test_replication import instances, wait_caught_up
from tests.process.test_replication_probes import _drain, _wait_log_line

__all__ = ["etcd", "instances"]  # the fixtures, used by name


def test_all_instances_wiped_are_told_how_to_start_the_group_empty(instances) -> None:
    config = instances["a"].config_path
    addresses = instance_addresses(config, "NYC")
    wait_active(instances, 30)

    async def put(body: bytes) -> None:
        async with connect(addresses, "SENDER") as client:
            await client.put(body, "ORDERS")
            await wait_caught_up(client, set("abc"))

    trio.run(put, b"1")
    for process in instances.values():
        process.terminate()
    for name, process in instances.items():
        shutil.rmtree(config.parent / name)
        process.start()

    line = _wait_log_line(config.parent / "a.log", "has waited", ELECTION_WAIT_LOG_S + 20)
    assert "every copy of the group's journals is gone" in line, line
    command = re.search(r"\((etcdctl [^)]*)\)", line)
    assert command is not None, line
    subprocess.run(shlex.split(command.group(1)), check=True, capture_output=True)

    wait_active(instances, 30)
    trio.run(put, b"2")
    assert trio.run(_drain, addresses) == [2]  # the group started empty, and serves
