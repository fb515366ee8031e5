"""30 link cut/heal cycles and 10 SIGKILLs of either group under concurrent recoverable
traffic both ways, then heal and drain: 0 lost acknowledged messages, 0 unmarked
duplicates, per-sender order kept on the in-order queues."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma, connect
from sim.bus import LinkedBus
from sim.checker import check_delivered
from tests.process.test_links import wait_for_link

SENDERS_PER_GROUP = 3
CYCLES = 30
KILL_EVERY = 3  # cycles 0, 3, 6, ... -> 10 kills
QUEUES = '[[group.queue]]\nid = 10\nname = "IN"\nconfirm = "explicit-in-order"\n' + "".join(
    f'[[group.queue]]\nid = {20 + index}\nname = "S{index}"\n' for index in range(SENDERS_PER_GROUP)
)
STORED_STATUSES = {Status.STORED, Status.SAF_FORCED}


@dataclass
class History:
    counters: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    acknowledged: set[str] = field(default_factory=set)
    deliveries: list[tuple[str, int]] = field(default_factory=list)
    acks: int = 0
    progress: trio.Event = field(default_factory=trio.Event)


async def sender(bus: LinkedBus, group: int, index: int, history: History) -> None:
    name = f"{group}.{index}"
    peer = 3 - group
    mode = DeliveryMode.WF_SAF if index == 0 else DeliveryMode.WF_DQF
    try:
        async with connect(bus.address(group), f"S{index}") as client:
            while True:
                counter = history.counters[name]
                history.counters[name] += 1
                psb = await client.put(
                    f"{name}:{counter}".encode(),
                    target=f"{peer}.10",
                    delivery=mode,
                    uma=Uma.SAF if index else Uma.DISC,
                    timeout=30,
                )
                if psb.delivery_status in STORED_STATUSES or psb.uma_status == Status.SAF_SUCCESS:
                    history.acknowledged.add(f"{name}:{counter}")
                    history.acks += 1
                    history.progress.set()
    except MrsError:
        return


async def consumer(bus: LinkedBus, group: int, history: History, poll: bool = False) -> None:
    try:
        async with connect(bus.address(group), "IN") as client:
            while True:
                try:
                    message = await client.get(timeout=0 if poll else None)
                except NoMoreMessages:
                    return
                history.deliveries.append((message.body.decode(), message.delivery_status))
                await client.confirm(message.seq)
    except MrsError:
        return


async def acks(history: History, count: int) -> None:
    target = history.acks + count
    while history.acks < target:
        history.progress = trio.Event()
        await history.progress.wait()


async def test_cut_heal_and_kill_under_traffic(tmp_path, nursery) -> None:
    rng = random.Random(3)
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES)
    await bus.start_proxies(nursery)
    await trio.to_thread.run_sync(bus.start)
    history = History()
    proxy = bus.proxy(1, 2)
    kills = 0
    try:
        await wait_for_link(bus, 1, 2)
        for cycle in range(CYCLES):
            async with trio.open_nursery() as workload:
                for group in (1, 2):
                    workload.start_soon(consumer, bus, group, history)
                    for index in range(SENDERS_PER_GROUP):
                        workload.start_soon(sender, bus, group, index, history)
                with trio.fail_after(60):
                    await acks(history, rng.randrange(5, 40))
                    proxy.cut()
                    await acks(history, rng.randrange(5, 40))
                    proxy.heal()
                    await acks(history, rng.randrange(1, 20))
                if cycle % KILL_EVERY == 0:
                    victim = rng.choice((1, 2))
                    bus.processes[victim].kill()
                    kills += 1
                    await trio.to_thread.run_sync(bus.processes[victim].start)
                workload.cancel_scope.cancel()
        for group, peer in ((1, 2), (2, 1)):
            await wait_for_link(bus, group, peer, "up", backlog=0)
        for group in (1, 2):
            await consumer(bus, group, history, poll=True)
    finally:
        bus.stop()

    verdict = check_delivered(history.acknowledged, history.deliveries)
    assert kills == 10 and proxy.cuts == CYCLES
    assert verdict.acknowledged > CYCLES * 10
    assert verdict.ok, verdict.failures()
