"""A planned switch-over (`mrs failover`) as an AK sender and a WF_CONF sender see it
(real etcd, three `mrs serve --instance` processes), docs/replication.md "A planned
switch-over" and "What the client does on a failover".

The defects found here: the MRS_ACKs the old active had made and the AK sender had
not yet got were lost at the switch (they lived in the old active's memory only), and
so was the MRS_ACK of an AK put answered while the hand-over waited (its commit was
held and never made); issue 51 asks that a planned switch-over lose nothing. Now every
AK put answered gets exactly one MRS_ACK, from the old active or the new one.
"""

from __future__ import annotations

import collections
import functools

import trio

from clients import MrsError, connect, instance_addresses
from mrs.model import DeliveryMode, Psb, Status
from sim.etcd import wait_active
from tests.cli_helpers import run_mrs
from tests.etcd_helpers import InstanceProcess, etcd
from tests.process.test_replication import instances, wait_caught_up

__all__ = ["etcd", "instances"]  # the fixtures, used by name

ALL = {"a", "b", "c"}
WF_CONF = DeliveryMode.WF_CONF
ANSWER_S_MAX = 30.0
"""Every call here is answered (or raises) within this: a hang fails the test."""
LANES = 4
PUTS_BEFORE = 20
PUTS_AFTER = 20
PUTS_MAX = 5000


async def _mrs_acks(client, timeout_s: float = 3.0) -> list[tuple[int, int]]:
    """(seq named, status) of every MRS_ACK on the client's queue, until none comes
    within `timeout_s`."""
    acks: list[tuple[int, int]] = []
    while True:
        try:
            ack = await client.get(timeout=timeout_s)
        except MrsError as none:
            assert none.status in (Status.TIMEOUT, Status.NOMOREMSG), none
            return acks
        assert ack.is_mrs_ack, ack
        acks.append((ack.ack_psb().seq, ack.ack_psb().status))


def _switch(instances: dict[str, InstanceProcess], first: str) -> str:
    """`mrs failover --to` another instance than `first` (the active); the one it
    switched to."""
    target = "b" if first != "b" else "c"
    config = instances["a"].config_path
    switched = run_mrs("failover", "--config", str(config), "NYC", "--to", target)
    assert switched.returncode == 0, switched.stderr
    assert f"{first} -> {target}" in switched.stdout, switched.stdout
    return target


def _assert_each_acked_once(answered: list[int], acks: list[tuple[int, int]]) -> None:
    twice = [seq for seq, count in collections.Counter(s for s, _ in acks).items() if count > 1]
    assert not twice, f"MRS_ACKs that came twice: {twice}"
    missing = sorted(set(answered) - {seq for seq, _ in acks})
    assert not missing, f"{len(missing)} of {len(answered)} AK puts got no MRS_ACK: {missing}"
    assert {seq for seq, _ in acks} <= set(answered), acks
    assert all(status == Status.SUCCESS for _, status in acks), acks


def test_mrs_acks_not_yet_got_at_a_switch_over_come_from_the_new_active(instances) -> None:
    """An AK_DQF sender puts 30 messages and gets none of their MRS_ACKs before `mrs
    failover`: after the switch it gets all 30 from the new active, each once. Before,
    it got none (they were in the old active's memory)."""
    wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def put_then_switch() -> list[int]:
        async with connect(addresses, "SENDER") as producer:
            await wait_caught_up(producer, ALL)
            answered = []
            for i in range(30):
                psb = await producer.put(b"ak%d" % i, "ANYORDER", delivery=DeliveryMode.AK_DQF)
                answered.append(psb.seq)
            await wait_caught_up(producer, ALL)  # every commit on every replica
            first = (await producer.status())["replication"]["instance"]
            await trio.to_thread.run_sync(_switch, instances, first)
            with trio.fail_after(ANSWER_S_MAX):
                acks = await _mrs_acks(producer)
            _assert_each_acked_once(answered, acks)
            return answered

    trio.run(put_then_switch)


def test_every_ak_put_answered_across_a_switch_over_gets_one_mrs_ack(instances) -> None:
    """Four lanes put AK_DQF and AK_SAF messages as fast as they are answered while `mrs
    failover` runs, a consumer getting and confirming along: every put answered gets
    exactly one MRS_ACK (from the old active before it stepped down, or from the new
    one), and every message answered is delivered."""
    wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def lane(
        producer, lane_id: int, answered: dict[int, bytes], switch: list[trio.Event]
    ) -> None:
        """AK puts until PUTS_AFTER after the switch is over; the first lane starts the
        switch (`switch[0]`) after PUTS_BEFORE."""
        mode = DeliveryMode.AK_DQF if lane_id % 2 else DeliveryMode.AK_SAF
        started, over = switch
        after = 0
        for i in range(PUTS_MAX):
            if i == PUTS_BEFORE and lane_id == 0:
                started.set()
            after += over.is_set()
            if after > PUTS_AFTER:
                return
            body = b"l%d:%d" % (lane_id, i)
            put = functools.partial(producer.put, body, "ANYORDER")
            with trio.fail_after(ANSWER_S_MAX):
                try:
                    psb: Psb = await put(delivery=mode)
                except MrsError:  # a put in flight at the switch, not answered: not counted
                    continue
            answered[psb.seq] = body

    async def scenario() -> tuple[dict[int, bytes], list[tuple[int, int]], list[bytes]]:
        answered: dict[int, bytes] = {}
        switch = [trio.Event(), trio.Event()]
        async with (
            connect(addresses, "SENDER") as producer,
            connect(addresses, "ANYORDER") as consumer,
        ):
            await wait_caught_up(producer, ALL)
            first = (await producer.status())["replication"]["instance"]
            async with trio.open_nursery() as nursery:
                for lane_id in range(LANES):
                    nursery.start_soon(lane, producer, lane_id, answered, switch)
                await switch[0].wait()
                await trio.to_thread.run_sync(_switch, instances, first)
                switch[1].set()
            with trio.fail_after(ANSWER_S_MAX * 2):
                acks = await _mrs_acks(producer)
                bodies: list[bytes] = []
                while True:
                    try:
                        message = await consumer.get(timeout=3)
                    except MrsError:
                        break
                    bodies.append(message.body)
                    await consumer.confirm(message.seq)
        return answered, acks, bodies

    answered, acks, bodies = trio.run(scenario)
    assert len(answered) > LANES * (PUTS_BEFORE + PUTS_AFTER), len(answered)
    _assert_each_acked_once(list(answered), acks)
    lost = sorted(set(answered.values()) - set(bodies))
    assert not lost, f"AK puts answered and never delivered: {lost}"


def test_a_wf_conf_put_re_sent_at_a_switch_over_is_answered_at_the_confirm(instances) -> None:
    """A WF_CONF put stored and waiting for its receiver's confirm when `mrs failover`
    runs is re-sent by the client to the new active under its key: that copy is not
    answered while the message is unconfirmed (a WF put made after it is answered
    first), and is answered SUCCESS with the first copy's seq once the receiver
    confirms the message there; the message is delivered once."""
    wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def scenario() -> None:
        answers: list[Psb] = []

        async def wf_conf(producer) -> None:
            with trio.fail_after(ANSWER_S_MAX * 2):
                answers.append(await producer.put(b"wfconf", "ANYORDER", delivery=WF_CONF))

        async with (
            connect(addresses, "SENDER") as producer,
            connect(addresses, "ANYORDER") as consumer,
        ):
            await wait_caught_up(producer, ALL)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wf_conf, producer)
                with trio.fail_after(ANSWER_S_MAX):  # stored, waiting for the confirm
                    while (await producer.pending(["ANYORDER"])) != [1]:
                        await trio.sleep(0.05)
                await wait_caught_up(producer, ALL)
                first = (await producer.status())["replication"]["instance"]
                await trio.to_thread.run_sync(_switch, instances, first)
                with trio.fail_after(ANSWER_S_MAX):
                    while producer.resent_puts < 1:
                        await trio.sleep(0.05)
                await producer.put(b"after", "ORDERS")  # answered after a later commit
                assert not answers, f"the copy was answered before the confirm: {answers}"
                with trio.fail_after(ANSWER_S_MAX):
                    message = await consumer.get(timeout=ANSWER_S_MAX)
                assert message.body == b"wfconf", message
                await consumer.confirm(message.seq)
            (answer,) = answers
            assert answer.status == Status.SUCCESS and answer.seq == message.seq, answer
            assert answer.delivery_status == Status.SUCCESS, answer
            with trio.fail_after(ANSWER_S_MAX):
                again = await _drained(consumer)
            assert again == [], again

    trio.run(scenario)


async def _drained(client) -> list[bytes]:
    """The bodies of what is left on the client's queue."""
    bodies: list[bytes] = []
    while True:
        try:
            message = await client.get(timeout=2)
        except MrsError:
            return bodies
        bodies.append(message.body)
        await client.confirm(message.seq)
