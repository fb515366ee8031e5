"""An AK put re-sent under its own idempotency key after a planned switch-over, as an
AK sender sees it (real etcd, three `mrs serve --instance` processes;
docs/replication.md "A planned switch-over").

The defect found here: a copy of an AK put re-sent after a switch-over, before the
MRS_ACK the new active carried over reached its sender, got a second MRS_ACK naming
the same seq; now the carried-over one is its only one.
"""

from __future__ import annotations

import trio

from clients import connect, instance_addresses
from mrs.model import DeliveryMode
from sim.etcd import wait_active
from tests.etcd_helpers import etcd
from tests.process.test_failover_acks_27 import (
    ANSWER_S_MAX,
    _assert_each_acked_once,
    _mrs_acks,
    _switch,
)
from tests.process.test_replication import instances, wait_caught_up

__all__ = ["etcd", "instances"]  # the fixtures, used by name

ALL = {"a", "b", "c"}


def test_a_copy_re_sent_after_a_switch_over_gets_no_second_mrs_ack(instances) -> None:
    """An AK_DQF put under the caller's own idempotency key, its MRS_ACK not yet got at
    `mrs failover`; the sender re-sends it under the same key to the new active before
    taking its MRS_ACKs: the copy is answered with the first copy's seq, and one
    MRS_ACK names that seq (the one carried over). Before, the copy got one of its own
    too: two naming the same seq."""
    wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")
    headers = {"idempotency_key": "order-4711"}

    async def scenario() -> None:
        async with connect(addresses, "SENDER") as producer:
            await wait_caught_up(producer, ALL)
            ak = DeliveryMode.AK_DQF
            first = await producer.put(b"order", "ANYORDER", delivery=ak, headers=headers)
            await wait_caught_up(producer, ALL)
            active = (await producer.status())["replication"]["instance"]
            await trio.to_thread.run_sync(_switch, instances, active)
            with trio.fail_after(ANSWER_S_MAX):
                copy = await producer.put(b"order", "ANYORDER", delivery=ak, headers=headers)
            assert copy.seq == first.seq, (first, copy)
            with trio.fail_after(ANSWER_S_MAX):
                acks = await _mrs_acks(producer)
            _assert_each_acked_once([first.seq], acks)

    trio.run(scenario)
