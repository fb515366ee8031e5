"""A replicated group whose active loses its data directory while clients put: real
etcd, three real `mrs serve --instance` processes.

What it proves: the active whose data directory is moved away under it (a disk
unmounted, a directory deleted by mistake) answers none of the puts its journals can
no longer take; it steps down and stops, and the client sends them again to the
replica that takes over, which stores each once. Before, the active answered them
DQF_DEVICE_FAIL (and their UMA DLJ_FAILED) though the replicas could store them: an
application that reads only the put's status (SUCCESS) counted them stored, and none
was ever delivered.
"""

from __future__ import annotations

import trio

from clients import Status, connect, instance_addresses
from sim.etcd import wait_active
from tests.etcd_helpers import etcd
from tests.process.test_replication import instances, wait_in_sync
from tests.process.test_replication_probes import _drain

__all__ = ["etcd", "instances"]  # the fixtures, used by name

PUTS = 60
MOVE_AFTER = 20


def test_puts_made_as_the_actives_data_directory_vanishes_are_stored_by_the_next(
    instances,
) -> None:
    """Puts flow; the active's data directory is moved away after MOVE_AFTER of them:
    every put is answered STORED (by the next active for those the old one could not
    commit), the old active exits 1, and every put is delivered once, in order."""
    config = instances["a"].config_path
    addresses = instance_addresses(config, "NYC")
    first = wait_active(instances, 30)

    async def put_all() -> list[Status]:
        statuses = []
        async with connect(addresses, "SENDER") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            for number in range(PUTS):
                if number == MOVE_AFTER:
                    data_dir = config.parent / first
                    data_dir.rename(data_dir.with_name(f"{first}-moved"))
                psb = await client.put(b"%d" % number, "ORDERS")
                statuses.append(psb.delivery_status)
        return statuses

    statuses = trio.run(put_all)
    assert statuses == [Status.STORED] * PUTS, statuses
    assert instances[first].process.wait(timeout=30) == 1
    assert trio.run(_drain, addresses) == list(range(PUTS))
