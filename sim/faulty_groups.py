"""Builds the swarm's groups on in-memory journals whose commits fail when the nemesis says.

A commit fails when the group was killed (nothing reaches the disk), when it stores
a message a sender waits for while "crash-at-commit" or "fail-at-commit" is armed
(where an early acknowledgement would be a lie), at a start the nemesis doomed, or
at random while the group's disk is failing.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import trio

from journals import Journal, WriteBatch
from journals.record import decode_record
from mrs.config.bus import BusConfig
from mrs.group import Guarantees
from mrs.model import DeliveryMode, InterestPoint, Notification
from mrs.replication.rules import KEPT_REPLICATION, ReplicationRules
from sim.membus import SimGroup
from sim.memstore import MemoryJournalStore
from sim.replicated import ReplicatedSimGroup
from sim.simulation import Simulation


def make_groups(
    sim: Simulation,
    bus: BusConfig,
    guarantees: Guarantees,
    rules: ReplicationRules = KEPT_REPLICATION,
) -> None:
    """Every group of the simulation, each keeping `guarantees` (or a broken build's);
    a replicated one (`Workload.replicated`) as three instances keeping `rules`, the
    commit faults aimed at its active."""
    doomed: dict[int, WriteBatch | None] = {}
    for group_id in sim.group_ids:
        sim.stores_failing[group_id] = False
        sim.start_faults[group_id] = 0
        sim.crash_at_commit[group_id] = False
        sim.fails_at_commit[group_id] = sim.shape.fails_at_commit_armed
        doomed[group_id] = None
        fault_rng = random.Random(sim.rng.random())

        def fault(
            batches: list[WriteBatch],
            group_id: int = group_id,
            fault_rng: random.Random = fault_rng,
        ) -> str | None:
            group = sim.groups[group_id]
            if group.server is not None and group.server.crashed:
                return "EIO"  # what a killed process still tries never reaches the disk
            if any(batch is doomed[group_id] for batch in batches):
                return "EIO"  # the writer retrying the failed batch alone: it fails again
            crash = sim.crash_at_commit[group_id]
            armed = crash or sim.fails_at_commit[group_id] > 0
            waited = _waited_message_batch(batches, group_id) if armed and group.up else None
            if waited is not None:
                doomed[group_id] = waited
                if crash:
                    sim.crash_at_commit[group_id] = False
                    group.crash()
                else:
                    sim.fails_at_commit[group_id] -= 1
                return fault_rng.choice(("EIO", "ENOSPC", "MAPFULL"))
            if sim.start_faults[group_id] > 0:
                sim.start_faults[group_id] -= 1
                return fault_rng.choice(("EIO", "ENOSPC", "MAPFULL"))
            if sim.stores_failing[group_id] and fault_rng.random() < 0.5:
                return fault_rng.choice(("EIO", "ENOSPC", "MAPFULL"))
            return None

        if group_id in sim.shape.replicated:
            sim.groups[group_id] = _replicated(sim, bus, group_id, fault, guarantees, rules)
            continue
        map_bytes_max = sim.shape.map_bytes_max if group_id == sim.group_ids[1] else None
        sim.groups[group_id] = SimGroup(
            bus,
            group_id,
            sim.network,
            MemoryJournalStore(
                fault=fault,
                bytes_max=map_bytes_max,
                on_full=lambda group_id=group_id: sim.history.record_fault(
                    "map-full", f"g{group_id} at {trio.current_time():.3f}"
                ),
            ),
            guarantees=guarantees,
        )


def _replicated(
    sim: Simulation,
    bus: BusConfig,
    group_id: int,
    fault: Callable[[list[WriteBatch]], str | None],
    guarantees: Guarantees,
    rules: ReplicationRules,
) -> ReplicatedSimGroup:
    """A replicated group whose active's commits fail as `fault` says."""
    return ReplicatedSimGroup(
        bus,
        group_id,
        sim.network,
        fault,
        guarantees,
        rules,
        on_term=lambda term, name: _term_won(sim, group_id, term, name),
        on_step_down=lambda name: sim.history.record_crash(group_id),
    )


def _term_won(sim: Simulation, group_id: int, term: int, name: str) -> None:
    sim.history.events.append({"term": term, "instance": f"g{group_id}{name}"})
    if term > 1:
        sim.history.record_crash(group_id)


def _waited_message_batch(batches: list[WriteBatch], group_id: int) -> WriteBatch | None:
    """The batch storing, in this group's DQF, a message put by a client of this group
    that waits (WF) for it to be stored, if any: where a STORED sent before the commit
    is a lie."""
    for batch in batches:
        for journal, key, value in batch.puts:
            if journal is Journal.DQF:
                record = decode_record(value, journal.value, key)
                mode = DeliveryMode(record.delivery)
                waited = (
                    mode.notification is Notification.WF
                    and mode.interest_point is not InterestPoint.CONF
                )
                if waited and record.source_group == group_id:
                    return batch
    return None
