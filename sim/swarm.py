"""Deterministic simulation: the real server code, three groups and their clients in one
trio run under `MockClock(autojump_threshold=0)`, an in-memory network and in-memory
journals, every fault drawn from one seed. Same seed, same history, byte for byte.

One seed is a safety phase (producers putting every mode with every UMA, consumers
with one or several gets in flight, and a nemesis that crashes groups — also during
start-up and recovery —, partitions and half-opens links, resets connections, fails
journal commits, fills a journal's map, pauses consumers so backlogs build and sends
malformed frames) followed by a heal-and-drain liveness phase, then the checker.
TigerBeetle's VOPR is the model. `Workload` says how big a seed is.

The parts: the world and workload shapes (`sim.simulation`), the faulty groups
(`sim.faulty_groups`), the nemesis (`sim.nemesis`); this module runs the phases.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from pathlib import Path

import trio
import trio.testing

from clients import MrsError
from journals import Journal
from mrs.group import Guarantees
from mrs.offline.stop_signals import run_stoppable
from mrs.replication.rules import KEPT_REPLICATION, ReplicationRules
from mrs.testing.broken_builds import broken_build
from mrs.testing.replication_builds import REPLICATION_SWITCHES, broken_replication
from sim import workload
from sim.checker import History, Verdict, check
from sim.faulty_groups import make_groups
from sim.membus import SimGroup
from sim.memnet import MemoryNetwork
from sim.nemesis import nemesis
from sim.replicated import ReplicatedSimGroup
from sim.simulation import (
    DEFAULT_WORKLOAD,
    FAILS_AT_COMMIT,
    GROUPS,
    MAP_FULL_WORKLOAD,
    NEMESIS_ACTIONS,
    PRODUCERS_PER_GROUP,
    QUICK_WORKLOAD,
    WORKLOADS,
    GroupNeverStarted,
    Simulation,
    Workload,
    bus_config,
)

__all__ = [
    "DEFAULT_WORKLOAD",
    "FAILS_AT_COMMIT",
    "GROUPS",
    "MAP_FULL_WORKLOAD",
    "NEMESIS_ACTIONS",
    "PRODUCERS_PER_GROUP",
    "QUICK_WORKLOAD",
    "WORKLOADS",
    "SimGroup",
    "Simulation",
    "Workload",
    "bus_config",
    "run_seed",
]


async def _status_of(sim: Simulation, group_id: int) -> dict | None:
    """The group's status, or None while it does not answer."""
    try:
        async with await sim.connect(group_id, None) as client:
            return await client.status()
    except MrsError:
        return None


async def _settled(sim: Simulation) -> bool:
    """True when every link is up with no SAF backlog and nothing in flight, and
    every replicated group has its replicas in sync (nothing held)."""
    for group in sim.groups.values():
        if isinstance(group, ReplicatedSimGroup) and not group.settled():
            return False
    for group_id in sim.group_ids:
        status = await _status_of(sim, group_id)
        if status is None:
            return False
        for link in status["links"].values():
            if link["state"] != "up" or link["saf_backlog"] or link.get("in_flight"):
                return False
            if link.get("notices_pending") or link.get("mrs_acks_owed"):
                return False
            if link.get("receipts_pending"):
                return False
    return True


async def _backlog(sim: Simulation) -> None:
    """One group's consumers hold off while a burst builds a long backlog there (see
    `Workload.backlog_seed_fraction`)."""
    victim = sim.rng.choice(sim.group_ids)
    sim.paused_consumers.add(victim)
    sim.history.record_fault("backlog", f"g{victim}")
    try:
        await workload.burst(sim, victim, sim.shape.backlog_messages)
    except MrsError:
        pass
    finally:
        sim.paused_consumers.discard(victim)


def _start_workload(sim: Simulation, nursery: trio.Nursery) -> None:
    shape = sim.shape
    for group_id in sim.group_ids:
        nursery.start_soon(workload.consumer, sim, group_id, workload.IN_ORDER_QUEUE, 1)
        nursery.start_soon(
            workload.consumer, sim, group_id, workload.PARALLEL_QUEUE, workload.PARALLEL_GETS
        )
        for index in range(shape.producers_per_group):
            nursery.start_soon(
                workload.producer,
                sim,
                group_id,
                index,
                shape.messages_per_producer_max,
                shape.put_pause_s_max,
            )
    if sim.rng.random() < shape.backlog_seed_fraction:
        nursery.start_soon(_backlog, sim)


async def _heal_and_settle(sim: Simulation, nursery: trio.Nursery) -> None:
    await sim.network.heal()
    for group in sim.groups.values():
        if isinstance(group, ReplicatedSimGroup):
            group.heal()
    sim.network.delay_probability = 0.0
    sim.paused_consumers.clear()
    for group_id, group in sim.groups.items():
        sim.stores_failing[group_id] = False
        sim.start_faults[group_id] = 0
        sim.crash_at_commit[group_id] = False
        sim.fails_at_commit[group_id] = 0
        if not group.up:
            await sim.start(group_id, nursery)
    with trio.move_on_after(sim.shape.drain_phase_s_max):
        while not await _settled(sim):
            await trio.sleep(0.5)


DRAIN_AGAIN_S = 1.0
"""The final drain looks again this often while a target queue's DQF still holds a
message it could not get: one handed to a consumer whose connection died without the
group seeing it yet (a blackholed link healed) comes back once the group does, and a
confirmed one goes once its commit does (replays 363 and 1841 of `mrs sim swarm
--replicated` ended their drain a moment too early).

It stops looking once the same records are left twice in a row and no group holds
one in memory (`_held_in_memory`): such a record never comes back (a broken build's
confirm that did not delete it, an unconfirmed message forgotten at a detach) and is
reported from the leftovers, not waited for until drain_phase_s_max."""


def _left_in_dqfs(sim: Simulation) -> frozenset[str]:
    """The workload queues' messages the groups' DQFs still hold after a drain."""
    targets = (workload.IN_ORDER_QUEUE, workload.PARALLEL_QUEUE)
    return frozenset(
        record.body.decode()
        for group in sim.groups.values()
        for _, record in group.store.scan(Journal.DQF)
        if getattr(record, "target_queue", None) in targets
    )


async def _held_in_memory(sim: Simulation) -> bool:
    """Whether some group still holds a workload queue's message where the drain
    could not take it: handed out to a session it has not yet seen die (it comes
    back when the group does), still waiting, or its queue attached by such a
    session; or whether some group does not answer."""
    targets = {str(workload.IN_ORDER_QUEUE), str(workload.PARALLEL_QUEUE)}
    for group_id in sim.group_ids:
        status = await _status_of(sim, group_id)
        if status is None:
            return True
        for queue_id, queue in status["queues"].items():
            if queue_id.rsplit(".", 1)[-1] in targets and (
                queue["pending"] or queue["unconfirmed"] or queue["attached"]
            ):
                return True
    return False


async def _final_drain(sim: Simulation) -> None:
    """Drain every target queue, let the notices the confirms made travel (an AK_CONF
    put's MRS_ACK is sent by its sender's group when the confirm notice arrives), then
    collect the response queues and the DLQs. (Collecting group 1's MRS_ACKs before
    group 2's queues were drained missed the acknowledgement of a message confirmed in
    that drain: seed 2's "missing" AK_CONF MRS_ACK.)"""
    with trio.move_on_after(sim.shape.drain_phase_s_max):
        looked: frozenset[str] | None = None
        while True:
            for group_id in sim.group_ids:
                for queue_id in (workload.IN_ORDER_QUEUE, workload.PARALLEL_QUEUE):
                    await workload.drain(sim, group_id, queue_id)
            left = _left_in_dqfs(sim)
            if not left or (left == looked and not await _held_in_memory(sim)):
                break
            looked = left
            await trio.sleep(DRAIN_AGAIN_S)
    with trio.move_on_after(sim.shape.drain_phase_s_max):
        while not await _settled(sim):
            await trio.sleep(0.5)
    for group_id in sim.group_ids:
        await workload.drain_side_queues(sim, group_id, sim.shape.producers_per_group)
    for group_id, group in sim.groups.items():
        for _, record in group.store.scan(Journal.DLJ):
            sim.history.dead_letter_journal.add(record.body.decode())
        for journal in (Journal.DQF, Journal.SAF):
            left = [record.body.decode() for _, record in group.store.scan(journal)]
            if left:
                sim.history.leftovers[f"g{group_id} {journal.name}"] = left


async def _run(
    seed: int,
    directory: Path,
    guarantees: Guarantees,
    shape: Workload,
    rules: ReplicationRules = KEPT_REPLICATION,
) -> History:
    rng = random.Random(seed)
    trio._core._run._r.seed(seed)  # trio's own scheduling choices, from the same seed
    network = MemoryNetwork(rng)
    sim = Simulation(seed, rng, network, {}, History(seed=seed), shape)
    sim.history.in_order_queues = {f"{g}.{workload.IN_ORDER_QUEUE}" for g in shape.groups}
    make_groups(sim, bus_config(directory, shape), guarantees, rules)
    try:
        await _phases(sim)
    except* GroupNeverStarted:  # in the history (never_started): the checker fails it
        pass
    return sim.history


async def _phases(sim: Simulation) -> None:
    """Start, load under the nemesis, heal and settle, drain."""
    async with trio.open_nursery() as nursery:
        for group_id in sim.group_ids:
            await sim.start(group_id, nursery)
        async with trio.open_nursery() as load:
            _start_workload(sim, load)
            await nemesis(sim, nursery)
            sim.stopping = True
            await _heal_and_settle(sim, nursery)
            sim.history.events.append({"settled_at_s": round(trio.current_time(), 3)})
            load.cancel_scope.cancel()
        await _final_drain(sim)
        nursery.cancel_scope.cancel()


def run_seed(
    seed: int, unsafe: frozenset[str] = frozenset(), shape: Workload = DEFAULT_WORKLOAD
) -> tuple[History, Verdict]:
    """Simulate one seed; the history and the checker's verdict. `unsafe` names the
    promises broken on purpose (mrs.testing.broken_builds, and for a replicated
    group mrs.testing.replication_builds), to prove the checker."""
    guarantees = broken_build(unsafe - REPLICATION_SWITCHES)
    rules = broken_replication(unsafe & REPLICATION_SWITCHES)
    with (
        tempfile.TemporaryDirectory(prefix="mrs-sim-") as scratch,
        _seeded_scheduling(),
        _quiet_instances(shape),
    ):
        history = run_stoppable(
            _run,
            seed,
            Path(scratch),
            guarantees,
            shape,
            rules,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    return history, check(history)


@contextlib.contextmanager
def _quiet_instances(shape: Workload):
    """A replicated group's instances print their role for a harness (REPLICA,
    READY, STEPPED DOWN); in the swarm those lines would bury its table."""
    if not shape.replicated:
        yield
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


@contextlib.contextmanager
def _seeded_scheduling():
    """Trio's seeded scheduler (ready tasks sorted, then shuffled from the seed) in the
    shell as in the tests. Trio switches it on only when Hypothesis is imported (its
    pytest plugin does); without it, the run order of tasks woken together (e.g. by a
    cancel) may follow memory addresses, so `mrs sim swarm --seed N` neither repeated
    itself byte for byte nor replayed what pytest ran (seed 2: 1,200 puts from the
    shell, 251 under pytest)."""
    run_module = trio._core._run
    saved = run_module._ALLOW_DETERMINISTIC_SCHEDULING
    run_module._ALLOW_DETERMINISTIC_SCHEDULING = True
    try:
        yield
    finally:
        run_module._ALLOW_DETERMINISTIC_SCHEDULING = saved
