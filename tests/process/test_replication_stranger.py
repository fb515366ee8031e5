"""A replicated group without TLS: a stranger who reaches a replica's replication
address and says hello as the active of a far newer term is refused, since etcd names
another leader of another term, and the group goes on with both replicas. (Before, the
replica took the stranger's term, refused the real active's records as older, and the
group went on with one replica: fenced off by one hello.) Real processes: etcd and
three `mrs serve --instance`."""

from __future__ import annotations

import trio

from clients import DeliveryMode, connect, instance_addresses
from mrs.config.bus import load_config
from mrs.model import Status
from sim.etcd import wait_active
from tests.etcd_helpers import etcd
from tests.process.test_replication import instances, wait_caught_up
from tests.process.test_replication_tls import stranger_hello

__all__ = ["etcd", "instances"]  # the fixtures, used by name


def test_a_stranger_cannot_raise_a_replicas_term(instances) -> None:
    active = wait_active(instances, 30)
    replica = next(name for name in instances if name != active)
    config = instances[replica].config_path
    port = load_config(config).group(1).instance(replica).replication_port

    async def put_then_caught_up(body: bytes) -> None:
        async with connect(instance_addresses(config, "NYC"), "ORDERS") as client:
            psb = await client.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)
            assert psb.delivery_status == Status.STORED
            await wait_caught_up(client, {"a", "b", "c"})  # every replica has it

    trio.run(put_then_caught_up, b"before")
    answer = stranger_hello(port, None)
    assert b"refuse" in answer and b"the coordinator names" in answer, answer
    assert active.encode() in answer  # the leader etcd names
    trio.run(put_then_caught_up, b"after")  # the stranger's replica too: not fenced off
    log = (config.parent / f"{replica}.log").read_text()
    assert f"replica {replica} refuses stranger: term 1000000" in log
