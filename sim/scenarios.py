"""Real-process fault scenarios: a bus of `mrs serve` processes, the same workload as the
deterministic simulation, and a nemesis that really kills, pauses, partitions and
fills disks, on a schedule drawn from a seed. Then heal, drain and check.

Scenarios (what each breaks):
- crash-loop: SIGKILL + restart of either group, again and again, also while it
  recovers (killed again within 0.3 s of being ready);
- partition-storm: link cuts, one-way blackholes and added latency on the proxy;
- disk-full: journal commits failing with ENOSPC, EIO and map full (fault file);
- slow-consumer: consumers that lag, and processes paused with SIGSTOP/SIGCONT;
- mixed: all of the above at once, and a malformed peer's bytes (`sim.hostile`).
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path

import trio

from clients import MrsError, connect
from journals import CorruptRecord, Journal, JournalStore
from sim import workload
from sim.bus import LinkedBus
from sim.checker import History
from sim.hostile import malformed
from sim.swarm import GROUPS, PRODUCERS_PER_GROUP

SCENARIOS: dict[str, tuple[str, ...]] = {
    "crash-loop": ("crash", "crash", "crash-in-recovery"),
    "partition-storm": ("partition", "blackhole", "latency"),
    "disk-full": ("disk",),
    "slow-consumer": ("pause", "slow"),
    "mixed": (
        "crash",
        "crash-in-recovery",
        "partition",
        "blackhole",
        "latency",
        "disk",
        "pause",
        "slow",
        "malformed",
    ),
}
QUEUES = workload.queues_toml(PRODUCERS_PER_GROUP)
SETTLE_S_MAX = 120.0


@dataclass(eq=False)
class RealRun:
    """What the shared workload needs: connect, a history, a stop flag, a seed."""

    bus: LinkedBus
    rng: random.Random
    history: History
    stopping: bool = False
    messages_max: int = 10**9
    consumer_delay_s: float = 0.0
    fault_files: dict[int, Path] = field(default_factory=dict)
    group_ids: tuple[int, ...] = GROUPS
    paused_consumers: set[int] = field(default_factory=set)

    async def connect(self, group_id: int, queue: str | None):
        return connect(self.bus.address(group_id), queue, program="sim", connect_timeout_s=5)


FAULTS_MIN_S_FACTOR = 3.0
"""How far past its duration a run may go to inject its minimum of faults."""


async def _nemesis(
    run: RealRun, actions: tuple[str, ...], duration_s: float, faults_min: int = 0
) -> None:
    """Faults for `duration_s`, and on until `faults_min` were injected (a loaded
    machine restarts a process slowly, so fewer fit in the time), but never past
    FAULTS_MIN_S_FACTOR times the duration."""
    rng = random.Random(run.rng.random())
    bus = run.bus
    proxy = bus.proxy(1, 2)
    started = trio.current_time()
    deadline = started + duration_s
    cap = started + duration_s * FAULTS_MIN_S_FACTOR
    while trio.current_time() < deadline or (
        sum(run.history.faults.values()) < faults_min and trio.current_time() < cap
    ):
        await trio.sleep(rng.uniform(0.3, 2.0))
        action = rng.choice(actions)
        victim = rng.choice(GROUPS)
        hold_s = rng.uniform(0.2, 2.5)
        run.history.record_fault(action, f"g{victim}")
        if action in ("crash", "crash-in-recovery"):
            bus.processes[victim].kill()
            run.history.record_crash(victim)
            await trio.sleep(rng.uniform(0.05, 1.0))
            await trio.to_thread.run_sync(bus.processes[victim].start)
            if action == "crash-in-recovery":  # again, while it redelivers and drains
                await trio.sleep(rng.uniform(0.0, 0.3))
                bus.processes[victim].kill()
                run.history.record_crash(victim)
                await trio.to_thread.run_sync(bus.processes[victim].start)
        elif action == "partition":
            proxy.cut()
            await trio.sleep(hold_s)
            proxy.heal()
        elif action == "blackhole":
            proxy.blackhole(rng.choice(("forward", "backward")))
            await trio.sleep(hold_s)
            proxy.cut()  # a stream with bytes missing cannot go on: drop it
            proxy.heal()
        elif action == "latency":
            proxy.latency_s = rng.uniform(0.005, 0.05)
            await trio.sleep(hold_s)
            proxy.latency_s = 0.0
        elif action == "disk":
            run.fault_files[victim].write_text(rng.choice(("ENOSPC", "EIO", "MAPFULL")))
            await trio.sleep(hold_s)
            run.fault_files[victim].write_text("")
        elif action == "pause":
            paused = bus.processes[victim].process
            assert paused is not None  # started before the nemesis runs
            pid = paused.pid
            os.kill(pid, signal.SIGSTOP)
            try:  # also when cancelled: a stopped process ignores the SIGTERM that stops it
                await trio.sleep(hold_s)
            finally:
                os.kill(pid, signal.SIGCONT)
        elif action == "malformed":
            await _malformed_peer(run, rng, victim)
        elif action == "slow":
            run.consumer_delay_s = rng.uniform(0.05, 0.3)
            await trio.sleep(hold_s * 2)
            run.consumer_delay_s = 0.0


async def _malformed_peer(run: RealRun, rng: random.Random, victim: int) -> None:
    """A broken program's bytes to a group's port; the server must shrug them off."""
    name, data = malformed(rng)
    run.history.events.append({"malformed": f"g{victim} {name}"})
    host, port = run.bus.address(victim).rsplit(":", 1)
    try:
        with trio.move_on_after(2):
            stream = await trio.open_tcp_stream(host, int(port))
            async with stream:
                await stream.send_all(data)
                while await stream.receive_some(65536):
                    pass
    except OSError:
        pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _settled(run: RealRun) -> bool:
    for group_id in GROUPS:
        try:
            async with await run.connect(group_id, None) as client:
                status = await client.status()
        except MrsError:
            return False
        for link in status["links"].values():
            if (
                link["state"] != "up"
                or link["saf_backlog"]
                or link.get("in_flight")
                or link.get("notices_pending")
                or link.get("mrs_acks_owed")
                or link.get("receipts_pending")
            ):
                return False
    return True


async def run_scenario(
    name: str, seed: int, duration_s: float, directory: Path, faults_min: int = 0
) -> History:
    """Run one scenario against real processes; the recorded history. The nemesis
    goes on past `duration_s` until it injected `faults_min` faults (bounded)."""
    actions = SCENARIOS[name]
    rng = random.Random(seed)
    fault_files = {group_id: directory / f"faults-g{group_id}" for group_id in GROUPS}
    directory.mkdir(parents=True, exist_ok=True)
    for path in fault_files.values():
        path.write_text("")
    bus = LinkedBus(directory / "bus", queues=QUEUES)
    for group_id, process in bus.processes.items():
        process.env["MRS_FAULT_FILE"] = str(fault_files[group_id])
    history = History(seed=seed)
    run = RealRun(bus, rng, history, fault_files=fault_files)
    async with trio.open_nursery() as nursery:
        await bus.start_proxies(nursery)
        try:
            await trio.to_thread.run_sync(bus.start)
            with trio.CancelScope() as watched:
                nursery.start_soon(_watch_for_deaths, run, watched)
                await _load_and_drain(run, actions, duration_s, faults_min)
        finally:
            bus.stop()
            nursery.cancel_scope.cancel()
    if not history.died:  # a run cut short has no drained journals to judge
        for group_id in GROUPS:
            _read_journals(history, group_id, bus.data_dir(group_id) / "journals")
    return history


DEATH_POLL_S = 0.2
"""How often `_watch_for_deaths` looks at the servers (a child's exit has no trio event)."""


async def _watch_for_deaths(run: RealRun, watched: trio.CancelScope) -> None:
    """End the run, with its verdict, once a group's server exits unbidden (not killed
    or stopped by the harness): a crash is the finding. Unwatched, the nemesis's next
    `crash` restarted it without a word ("a bad peer never takes a server down" went
    unchecked), and one left down was waited for (twice SETTLE_S_MAX) and then judged
    as lost and stuck messages."""
    while True:
        await trio.sleep(DEATH_POLL_S)
        dead = [process for process in run.bus.processes.values() if process.died_unbidden]
        if dead:
            run.history.died.extend(process.death_words() for process in dead)
            watched.cancel()
            return


async def _load_and_drain(
    run: RealRun, actions: tuple[str, ...], duration_s: float, faults_min: int
) -> None:
    """The workload under the nemesis, then heal, settle and drain every queue."""
    async with trio.open_nursery() as load:
        for group_id in GROUPS:
            load.start_soon(workload.consumer, run, group_id, workload.IN_ORDER_QUEUE, 1)
            load.start_soon(
                workload.consumer, run, group_id, workload.PARALLEL_QUEUE, workload.PARALLEL_GETS
            )
            for index in range(PRODUCERS_PER_GROUP):
                load.start_soon(workload.producer, run, group_id, index, run.messages_max)
        await _nemesis(run, actions, duration_s, faults_min)
        run.stopping = True
        _heal(run)
        with trio.move_on_after(SETTLE_S_MAX):
            while not await _settled(run):
                await trio.sleep(0.2)
        load.cancel_scope.cancel()
    for group_id in GROUPS:
        for queue_id in (workload.IN_ORDER_QUEUE, workload.PARALLEL_QUEUE):
            await workload.drain(run, group_id, queue_id)
    with trio.move_on_after(SETTLE_S_MAX):  # the drain's confirm notices travel:
        while not await _settled(run):  # AK_CONF MRS_ACKs are sent on arrival
            await trio.sleep(0.2)
    for group_id in GROUPS:
        await workload.drain_side_queues(run, group_id, PRODUCERS_PER_GROUP)


def _read_journals(history: History, group_id: int, path: Path) -> None:
    """After the drain: what the DLJ holds, and anything left in a DQF or SAF. A
    corrupt record (in any of them) is a leftover too, named by its problem: the
    verdict shows it as stuck, where `record.body` of a CorruptRecord ended the run in
    an AttributeError with no verdict at all."""
    store = JournalStore(path, readonly=True)
    try:
        for journal in (Journal.DLJ, Journal.DQF, Journal.SAF):
            left = []
            for _, record in store.scan(journal):
                if isinstance(record, CorruptRecord):
                    left.append(f"corrupt: {record}")
                elif journal is Journal.DLJ:
                    history.dead_letter_journal.add(record.body.decode())
                else:
                    left.append(record.body.decode())
            if left:
                history.leftovers[f"g{group_id} {journal.name}"] = left
    finally:
        store.close()


def _heal(run: RealRun) -> None:
    proxy = run.bus.proxy(1, 2)
    proxy.heal()
    proxy.latency_s = 0.0
    run.consumer_delay_s = 0.0
    for path in run.fault_files.values():
        path.write_text("")
    for process in run.bus.processes.values():
        if process.running and process.process is not None:
            os.kill(process.process.pid, signal.SIGCONT)
