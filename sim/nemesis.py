"""The swarm's nemesis: draws one fault at a time from the seed and acts it out.

Crashes (also at a commit, during recovery, at start-up), failed commits,
partitions, half-open links, connection resets, a failing disk, delays, paused
consumers and malformed frames; each is recorded in the history before it acts.
"""

from __future__ import annotations

import random

import trio

from sim import replicated
from sim.hostile import malformed
from sim.simulation import FAILS_AT_COMMIT, Simulation


async def nemesis(sim: Simulation, nursery: trio.Nursery) -> None:
    rng = random.Random(sim.rng.random())
    deadline = trio.current_time() + sim.shape.safety_phase_s
    opening = list(sim.shape.opening_actions)
    rng.shuffle(opening)
    while trio.current_time() < deadline:
        await trio.sleep(rng.uniform(0.2, 2.0))
        if opening:
            action = opening.pop()
            await replicated.wait_ready(sim)
        else:
            action = rng.choice(sim.shape.actions)
        victim = rng.choice(sim.group_ids)
        sim.history.record_fault(action, f"g{victim} at {trio.current_time():.3f}")
        await _act(sim, nursery, rng, action, victim)


async def _act(
    sim: Simulation, nursery: trio.Nursery, rng: random.Random, action: str, victim: int
) -> None:
    if action in replicated.REPLICATION_ACTIONS:
        await replicated.act(sim, nursery, rng, action)
        return
    group = sim.groups[victim]
    other = rng.choice([group_id for group_id in sim.group_ids if group_id != victim])
    if action in ("crash", "crash-in-recovery", "start-fails") and group.up:
        group.crash()
        sim.history.record_crash(victim)
        await trio.sleep(rng.uniform(0.05, 2.0))
        if action == "start-fails":
            sim.start_faults[victim] = 1
        await sim.start(victim, nursery)
        if action == "crash-in-recovery":
            await trio.sleep(rng.uniform(0.0, 0.3))  # SAF drains, redeliveries under way
            group.crash()
            sim.history.record_crash(victim)
            await trio.sleep(rng.uniform(0.01, 0.5))
            await sim.start(victim, nursery)
    elif action == "fail-at-commit":
        for group_id in sim.group_ids:  # disk hiccups on every group, each armed
            sim.fails_at_commit[group_id] += FAILS_AT_COMMIT  # until it hits (or the heal)
    elif action == "crash-at-commit" and group.up:
        sim.crash_at_commit[victim] = True
        with trio.move_on_after(rng.uniform(1.0, 5.0)):
            while group.up and sim.crash_at_commit[victim]:
                await trio.sleep(0.01)
        sim.crash_at_commit[victim] = False
        if not group.up:
            sim.history.record_crash(victim)
            await trio.sleep(rng.uniform(0.05, 1.0))
            await sim.start(victim, nursery)
    elif action == "partition":
        await sim.network.partition(f"g{victim}", f"g{other}")
        await trio.sleep(rng.uniform(0.1, 3.0))
        await sim.network.heal()
    elif action == "half-open":
        sim.network.blackhole(f"g{victim}", rng.choice((f"g{other}", "clients")))
        await trio.sleep(rng.uniform(0.1, 3.0))
        await sim.network.heal()
    elif action == "reset":
        await sim.network.reset_one()
    elif action == "disk":
        sim.stores_failing[victim] = True
        await trio.sleep(rng.uniform(0.05, 1.0))
        sim.stores_failing[victim] = False
    elif action == "delay":
        sim.network.delay_probability = 0.3
        await trio.sleep(rng.uniform(0.5, 3.0))
        sim.network.delay_probability = 0.0
    elif action == "pause-consumers":
        sim.paused_consumers.add(victim)
        await trio.sleep(rng.uniform(0.5, 4.0))
        sim.paused_consumers.discard(victim)
    elif action == "malformed-peer":
        await _malformed_peer(sim, rng, victim)


async def _malformed_peer(sim: Simulation, rng: random.Random, victim: int) -> None:
    name, data = malformed(rng)
    sim.history.events.append({"malformed": f"g{victim} {name}"})
    host, port = sim.groups[victim].address.rsplit(":", 1)
    try:
        stream = await sim.network.node("evil").connect(host, int(port))
    except OSError:
        return
    try:
        await stream.send_all(data)
        with trio.move_on_after(0.5):
            while await stream.receive_some(65536):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()
