"""SIGKILL a real server under concurrent recoverable puts, 20+ times.

After every restart: each put acknowledged as stored is delivered, no message is
delivered twice without POSSDUPL, and the in-order queue keeps each sender's order.
Kills happen after a random number of acknowledgements (seeded), so they land
while puts, gets and confirms are in flight.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma, connect
from sim.checker import check_delivered
from tests.conftest import Bus

SENDERS = 6
KILLS = 20

QUEUES = (
    "".join(
        f'[[group.queue]]\nid = {20 + index}\nname = "S{index}"\n'
        'confirm = "explicit-out-of-order"\n'
        for index in range(SENDERS)
    )
    + '[[group.queue]]\nid = 10\nname = "ORDERS"\nconfirm = "explicit-in-order"\n'
)


@dataclass
class History:
    next_counter: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    acknowledged: set[str] = field(default_factory=set)
    deliveries: list[tuple[str, int]] = field(default_factory=list)
    acks_this_round: int = 0


async def _sender(
    address: str, index: int, history: History, enough: trio.Event, threshold: int
) -> None:
    try:
        async with connect(address, queue=f"S{index}") as client:
            while True:
                counter = history.next_counter[index]
                history.next_counter[index] += 1
                psb = await client.put(
                    f"{index}:{counter}".encode(),
                    target="ORDERS",
                    delivery=DeliveryMode.WF_DQF,
                    uma=Uma.DISC,
                )
                assert psb.delivery_status == Status.STORED, psb
                history.acknowledged.add(f"{index}:{counter}")
                history.acks_this_round += 1
                if history.acks_this_round >= threshold:
                    enough.set()
    except MrsError:
        return  # the server was killed under us


async def _consumer(address: str, history: History, poll: bool) -> None:
    try:
        async with connect(address, queue="ORDERS") as client:
            while True:
                try:
                    message = await client.get(timeout=0 if poll else None)
                except NoMoreMessages:
                    return
                history.deliveries.append((message.body.decode(), message.delivery_status))
                await client.confirm(message.seq)
    except MrsError:
        return


async def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path) -> None:
    rng = random.Random(20261122)
    bus = Bus(tmp_path, queues=QUEUES)
    history = History()
    try:
        await trio.to_thread.run_sync(bus.start)
        for _ in range(KILLS):
            enough = trio.Event()
            history.acks_this_round = 0
            threshold = rng.randrange(10, 150)
            async with trio.open_nursery() as nursery:
                for index in range(SENDERS):
                    nursery.start_soon(_sender, bus.address, index, history, enough, threshold)
                nursery.start_soon(_consumer, bus.address, history, False)
                await enough.wait()
                bus.kill()
            await trio.to_thread.run_sync(bus.start)
        await _consumer(bus.address, history, poll=True)
    finally:
        bus.process.terminate()

    sent = {
        f"{index}:{counter}"
        for index in range(SENDERS)
        for counter in range(history.next_counter[index])
    }
    verdict = check_delivered(history.acknowledged, history.deliveries, sent=sent)
    assert verdict.acknowledged > KILLS * 10
    assert verdict.ok, verdict.failures()
