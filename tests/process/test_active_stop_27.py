"""A replicated group's active stopped on purpose, as an operator and an AK sender see
it (real etcd, three `mrs serve --instance` processes): SIGTERM of the active
(`systemctl stop`, `kill`), and an AK put re-sent under its own idempotency key after
a planned switch-over (docs/replication.md "What survives what" and "A planned
switch-over").

The defects found here: SIGTERM of the active gave its lease up and stopped as a
crash does, so the MRS_ACKs waiting in its memory were lost (and an AK put answered
but not yet committed never got one); now it hands over to a replica in sync as `mrs
failover` does. And a copy of an AK put re-sent after a switch-over, before the
MRS_ACK the new active carried over reached its sender, got a second MRS_ACK naming
the same seq; now the carried-over one is its only one.
"""

from __future__ import annotations

import signal
import time

import trio

from clients import MrsError, connect, instance_addresses
from mrs.limits import REPLICATION_HANDOVER_WAIT_S
from mrs.model import DeliveryMode, Psb
from sim.etcd import wait_active
from tests.etcd_helpers import InstanceProcess, etcd
from tests.process.test_failover_acks_27 import (
    ANSWER_S_MAX,
    _assert_each_acked_once,
    _mrs_acks,
    _switch,
)
from tests.process.test_replication import instances, wait_caught_up

__all__ = ["etcd", "instances"]  # the fixtures, used by name

ALL = {"a", "b", "c"}
STOP_S_MAX = 12.0
"""A SIGTERM'd active exits within this (its hand-over is bounded), hand-over or not."""
LANES = 4
PUTS_BEFORE = 20
PUTS_AFTER = 20
PUTS_MAX = 5000


def _sigterm(process: InstanceProcess) -> float:
    """SIGTERM `process` and wait for it to exit (within STOP_S_MAX); the seconds it took."""
    assert process.process is not None
    began_s = time.monotonic()
    process.process.send_signal(signal.SIGTERM)
    process.process.wait(timeout=STOP_S_MAX)
    return time.monotonic() - began_s


def _log(process: InstanceProcess) -> str:
    return (process.config_path.parent / f"{process.name}.log").read_text()


def test_sigterm_of_the_active_hands_the_mrs_acks_not_yet_got_to_the_next_active(
    instances,
) -> None:
    """An AK_DQF sender puts 30 messages and gets none of their MRS_ACKs before the
    active is stopped with SIGTERM: the active hands over to a replica in sync, exits
    with status 0, and the sender gets all 30 MRS_ACKs from the new active, each once.
    Before, SIGTERM resigned as a crash does, and the 30 were lost with its memory."""
    wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def put_then_stop() -> None:
        async with connect(addresses, "SENDER") as producer:
            await wait_caught_up(producer, ALL)
            answered = []
            for i in range(30):
                psb = await producer.put(b"ak%d" % i, "ANYORDER", delivery=DeliveryMode.AK_DQF)
                answered.append(psb.seq)
            await wait_caught_up(producer, ALL)
            first = (await producer.status())["replication"]["instance"]
            took_s = await trio.to_thread.run_sync(_sigterm, instances[first])
            assert instances[first].process is not None
            assert instances[first].process.returncode == 0, _log(instances[first])[-2000:]
            assert "planned hand-over to" in _log(instances[first]), took_s
            with trio.fail_after(ANSWER_S_MAX):
                acks = await _mrs_acks(producer)
            _assert_each_acked_once(answered, acks)

    trio.run(put_then_stop)


async def _lane(producer, lane_id: int, answered: dict[int, bytes], stop: list[trio.Event]) -> None:
    """AK puts until PUTS_AFTER after the stop is over; the first lane starts the stop
    (`stop[0]`) after PUTS_BEFORE."""
    mode = DeliveryMode.AK_DQF if lane_id % 2 else DeliveryMode.AK_SAF
    started, over = stop
    after = 0
    for i in range(PUTS_MAX):
        if i == PUTS_BEFORE and lane_id == 0:
            started.set()
        after += over.is_set()
        if after > PUTS_AFTER:
            return
        body = b"l%d:%d" % (lane_id, i)
        with trio.fail_after(ANSWER_S_MAX):
            try:
                psb: Psb = await producer.put(body, "ANYORDER", delivery=mode)
            except MrsError:  # in flight at the stop, not answered: not counted
                continue
        answered[psb.seq] = body


async def _drain(client) -> list[bytes]:
    """The bodies of what is left on the client's queue, each confirmed."""
    bodies: list[bytes] = []
    while True:
        try:
            message = await client.get(timeout=3)
        except MrsError:
            return bodies
        bodies.append(message.body)
        await client.confirm(message.seq)


def test_every_ak_put_answered_across_a_sigterm_of_the_active_gets_one_mrs_ack(
    instances,
) -> None:
    """Four lanes put AK_DQF and AK_SAF messages as fast as they are answered while the
    active is SIGTERM'd: every put answered gets exactly one MRS_ACK (from the old
    active, or carried over to the new one), and every message answered is delivered."""
    wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def scenario() -> tuple[dict[int, bytes], list[tuple[int, int]], list[bytes]]:
        answered: dict[int, bytes] = {}
        stop = [trio.Event(), trio.Event()]
        async with (
            connect(addresses, "SENDER") as producer,
            connect(addresses, "ANYORDER") as consumer,
        ):
            await wait_caught_up(producer, ALL)
            first = (await producer.status())["replication"]["instance"]
            async with trio.open_nursery() as nursery:
                for lane_id in range(LANES):
                    nursery.start_soon(_lane, producer, lane_id, answered, stop)
                await stop[0].wait()
                await trio.to_thread.run_sync(_sigterm, instances[first])
                stop[1].set()
            with trio.fail_after(ANSWER_S_MAX * 2):
                acks = await _mrs_acks(producer)
                bodies = await _drain(consumer)
        return answered, acks, bodies

    answered, acks, bodies = trio.run(scenario)
    assert len(answered) > LANES * (PUTS_BEFORE + PUTS_AFTER), len(answered)
    _assert_each_acked_once(list(answered), acks)
    lost = sorted(set(answered.values()) - set(bodies))
    assert not lost, f"AK puts answered and never delivered: {lost}"


def test_sigterm_of_an_active_whose_replicas_are_lost_stops_within_the_bound_and_says_so(
    instances,
) -> None:
    """Both replicas SIGKILLed (the last one stays named in sync: it holds every
    answer): SIGTERM of the active finds nobody acknowledging its hand-over, so it
    stops within the hand-over's bound (5 s, REPLICATION_HANDOVER_WAIT_S) and says in
    one line why and what goes with it. Before, it said nothing of it."""
    wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def replicas_lost() -> str:
        async with connect(addresses, "SENDER") as producer:
            await wait_caught_up(producer, ALL)
            first = (await producer.status())["replication"]["instance"]
            for name in sorted(ALL - {first}):
                instances[name].kill()
            await producer.put(b"ak", "ANYORDER", delivery=DeliveryMode.AK_DQF)
            return first

    first = trio.run(replicas_lost)
    took_s = _sigterm(instances[first])
    assert took_s < REPLICATION_HANDOVER_WAIT_S + 3.0, took_s
    assert instances[first].process is not None
    assert instances[first].process.returncode == 0, _log(instances[first])[-3000:]
    said = [line for line in _log(instances[first]).splitlines() if "without a hand-over" in line]
    assert len(said) == 1, _log(instances[first])[-3000:]
    # Its links to them gone: it waits for none; not yet seen gone: none acknowledges.
    why = ("no replica in sync is linked", "did not acknowledge")
    assert any(text in said[0] for text in why) and "as in a crash" in said[0], said


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
