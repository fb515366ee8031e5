"""A replicated group run as an operator runs it: real `mrs serve --instance`
processes and a real etcd, failed over by SIGKILL."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, NoMoreMessages, Status, Uma, connect, instance_addresses
from sim.etcd import wait_active
from sim.processes import GroupProcess
from tests.etcd_helpers import InstanceProcess, etcd
from tests.process.test_replicated_link_probes import _linked_config, _wait_in_sync, _wait_link_up

__all__ = ["etcd"]  # the fixture, used by name

WAIT_S = 60.0


async def _put_nowhere(nyc_address: str) -> int:
    """A WF_SAF put to group 2's queue 50, which it lacks: answered STORED, then
    dead-lettered by the link onto group 2's (memory-only) DLQ."""
    async with connect(nyc_address, "SENDER") as sender:
        psb = await sender.put(b"nowhere", "2.50", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
    await _wait_link_up(nyc_address, 2, backlog=0)  # the SAF record is gone
    return psb.seq


async def _get_dlq(addresses: list[str], seq: int, status: Status, confirm: bool) -> None:
    async with connect(addresses, "DLQ") as dlq:
        message = await dlq.get(timeout=WAIT_S)
        assert (message.body, message.seq) == (b"nowhere", seq)
        assert message.delivery_status == status
        if confirm:
            await dlq.confirm(message.seq)


async def _dlq_empty(addresses: list[str]) -> None:
    async with connect(addresses, "DLQ") as dlq:
        with pytest.raises(NoMoreMessages):
            await dlq.get(timeout=0)


def test_a_link_dead_letter_on_a_replicated_dlq_survives_failovers(etcd, tmp_path: Path) -> None:
    """docs/undeliverable.md, "One exception": the journaled DLQ copy of a stored
    message is replicated like any record, so the new active has it: CONFIRMREQ when
    never got, POSSDUPL when got and not confirmed before the active was lost."""
    config = _linked_config(etcd.endpoint, tmp_path)
    instances = {name: InstanceProcess(config, name, group_id=2) for name in "abc"}
    nyc = GroupProcess(config, 1)
    try:
        for process in instances.values():
            process.start()
        active = wait_active(instances, 30)
        ldn = instance_addresses(config, "LDN")
        trio.run(_wait_in_sync, ldn)
        seq = trio.run(_put_nowhere, nyc.start())
        trio.run(_wait_in_sync, ldn)
        for status, confirm in ((Status.CONFIRMREQ, False), (Status.POSSDUPL, True)):
            instances[active].kill()
            lost, active = active, wait_active(instances, 30)
            instances[lost].start()
            trio.run(_wait_in_sync, ldn)
            trio.run(_get_dlq, ldn, seq, status, confirm)
        instances[active].kill()
        wait_active(instances, 30)
        trio.run(_dlq_empty, ldn)
    finally:
        nyc.terminate()
        for process in instances.values():
            process.terminate()
