"""`mrs bench`: durable throughput, measured against what the disk itself can do.

A durable put can never be cheaper than the disk's flush, so a bare "puts/s" figure
says little by itself: it changes tenfold between a laptop SSD, a cloud volume and
tmpfs. This module measures, in one run and on one directory of one disk:

1. raw fsync/s: write one byte and `os.fsync` it, in a loop (the disk's ceiling for
   anything that waits for its own flush);
2. LMDB synced commits/s: one 1 KiB put per write transaction through
   `JournalStore.commit_now` (what one-commit-per-message storage would give);
3. recoverable WF_DQF puts/s through a real `mrs serve` process, for each client
   count asked for (each client its own connection, one put at a time), plus a
   pipelined run of 4 connections x 32 tasks in flight on each;
4. the same 32-client WF_DQF puts across a link: clients on group 1, target queue
   in group 2 (two real servers, the link through a `FaultProxy`, as `LinkedBus`
   builds them), with group 2's messages per commit;
5. put -> get -> confirm end to end: 4 x 32 WF_DQF producers and one consumer
   connection with 32 get+confirm loops in flight, counting the messages confirmed
   within the window, once with the target queue in group 1 and once in group 2.

Every figure is then reported as a ratio to (1) and (2), and each cross-group
figure also as a ratio to its same-group counterpart from the same run: group
commit is what lets the server exceed the disk, and the ratios are what carry over
from one machine to another. Each server run starts on a fresh data directory, so
every run begins with an empty DQF.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import struct
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import trio
from rich.console import Console
from rich.table import Table

from journals import Journal, JournalStore, WriteBatch, queue_key
from sim.bus import LinkedBus
from sim.processes import GroupProcess, write_single_group_config

TARGET_QUEUE = 10
SENDER_QUEUE_FIRST = 100
SENDER_QUEUE_LAST = 999
LMDB_VALUE_BYTES = 1024
PIPELINE_CONNECTIONS = 4
PIPELINE_TASKS_PER_CONNECTION = 32
CROSS_GROUP_CONNECTIONS = 32
"""Clients of the cross-group put run (each one put at a time), paired with the
same-group run of as many clients."""
E2E_PRODUCER_CONNECTIONS = 4
E2E_PRODUCER_TASKS_PER_CONNECTION = 32
E2E_CONSUMER_TASKS = 32
"""get+confirm loops sharing the one consumer connection."""
E2E_GET_TIMEOUT_S = 1.0
TARGET_UNCONFIRMED_MAX = 100_000
"""The target queue confirms out of order, so 32 concurrent confirms are fine."""
DQF_MESSAGES_MAX = 10_000_000
JOURNAL_BYTES_MAX = 8 << 30
"""LMDB map size of the bench server; the file is sparse, so this costs no disk."""
SERVER_STOP_TIMEOUT_S = 30.0
STATUS_WAIT_S = 30.0
LINK_UP_WAIT_S = 30.0
LOCAL_GROUP = 1
REMOTE_GROUP = 2
_STAMP = struct.Struct("<d")
"""perf_counter() at the put, at the front of each end-to-end body (for latency)."""


@dataclass
class Result:
    """One measured figure."""

    name: str
    kind: str
    """"fsync", "lmdb" or "server"."""
    count: int
    elapsed_s: float
    latencies_s: list[float] = field(default_factory=list, repr=False)
    connections: int = 0
    in_flight: int = 0
    failures: int = 0
    msgs_per_commit: float | None = None
    writer_delta: dict | None = None
    """The writer of the group whose DQF receives the messages (`dqf_group`)."""
    server_cpu_pct: float | None = None
    """All server processes of the run together."""
    client_cpu_pct: float | None = None
    dqf_messages_after: int | None = None
    workload: str = ""
    """Server rows: "put" (WF_DQF puts only) or "put-get-confirm" (end to end)."""
    route: str = ""
    """Server rows: "same-group" or "cross-group" (over the link 1 -> 2)."""
    dqf_group: int | None = None
    batches_per_commit: float | None = None
    writer_deltas: dict[str, dict] | None = None
    """Every group's writer delta, by group id."""
    server_cpu_pct_by_group: dict[str, float | None] | None = None
    link_after: dict | None = None
    """Cross-group rows: group 1's view of the link to group 2 after the run."""
    consumer_in_flight: int = 0
    puts_stored: int | None = None
    """End-to-end rows: puts answered STORED within the window."""

    @property
    def rate(self) -> float:
        return self.count / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def latency_ms(self, quantile: float) -> float | None:
        if not self.latencies_s:
            return None
        ordered = sorted(self.latencies_s)
        index = min(len(ordered) - 1, max(0, round(quantile * (len(ordered) - 1))))
        return 1000 * ordered[index]

    @property
    def mean_latency_ms(self) -> float | None:
        if not self.latencies_s:
            return None
        return 1000 * sum(self.latencies_s) / len(self.latencies_s)


# ---------------------------------------------------------------------- the disk
def measure_fsync(directory: Path, seconds: float) -> Result:
    """Append one byte and fsync it, for `seconds`."""
    path = directory / "fsync.dat"
    latencies: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        deadline = started + seconds
        now = started
        while now < deadline:
            os.write(fd, b"x")
            os.fsync(fd)
            after = time.perf_counter()
            latencies.append(after - now)
            now = after
        elapsed = now - started
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return Result("raw fsync (1-byte write + fsync)", "fsync", len(latencies), elapsed, latencies)


def measure_lmdb(directory: Path, seconds: float) -> Result:
    """One 1 KiB put per synced LMDB write transaction, for `seconds`."""
    path = directory / "lmdb"
    value = os.urandom(LMDB_VALUE_BYTES)
    latencies: list[float] = []
    store = JournalStore(path, map_size_bytes=1 << 30)
    try:
        started = time.perf_counter()
        deadline = started + seconds
        now = started
        seq = 0
        while now < deadline:
            seq += 1
            store.commit_now(
                WriteBatch.empty().put_raw(Journal.DQF, queue_key(TARGET_QUEUE, seq), value)
            )
            after = time.perf_counter()
            latencies.append(after - now)
            now = after
        elapsed = now - started
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    return Result(
        "LMDB synced commit, 1 put (1 KiB) per txn",
        "lmdb",
        len(latencies),
        elapsed,
        latencies,
        msgs_per_commit=1.0,
    )


# ---------------------------------------------------------------------- the servers
def _queues_toml(senders: int) -> str:
    """The target queue (out-of-order confirms) and `senders` sender queues."""
    queues = [
        f"""
        [[group.queue]]
        id = {TARGET_QUEUE}
        name = "TARGET"
        confirm = "explicit-out-of-order"
        messages_max = {DQF_MESSAGES_MAX}
        unconfirmed_max = {TARGET_UNCONFIRMED_MAX}
        """
    ]
    for index in range(senders):
        queues.append(f"""
        [[group.queue]]
        id = {SENDER_QUEUE_FIRST + index}
        name = "SENDER{index}"
        """)
    return "".join(textwrap.dedent(q) for q in queues)


def _limits_toml() -> str:
    return textwrap.dedent(f"""\
        dqf_messages_max = {DQF_MESSAGES_MAX}
        journal_bytes_max = {JOURNAL_BYTES_MAX}
        """)


def _bench_config(directory: Path, senders: int) -> Path:
    return write_single_group_config(directory, queues=_queues_toml(senders), limits=_limits_toml())


def _process_cpu_s(pid: int) -> float | None:
    """utime + stime of a process in seconds (Linux /proc); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Servers:
    """The running servers of one measurement: group id -> address and pid."""

    addresses: dict[int, str]
    pids: dict[int, int]


Phase = Callable[[Servers], Awaitable[Result]]


class _Monitors:
    """One status connection per group, and CPU readings of every server process."""

    def __init__(self, servers: Servers, clients: dict[int, object]) -> None:
        self.servers = servers
        self.clients = clients
        self.status_before: dict[int, dict] = {}
        self.status_after: dict[int, dict] = {}
        self.cpu_before: dict[int, float | None] = {}
        self.cpu_after: dict[int, float | None] = {}
        self.client_cpu_before = 0.0
        self.client_cpu_after = 0.0
        self.started = 0.0
        self.elapsed = 0.0

    @classmethod
    async def open(cls, servers: Servers, stack: contextlib.AsyncExitStack) -> _Monitors:
        """Connect to every group; the connections close with `stack`."""
        from clients import connect

        clients = {}
        for group_id, address in servers.addresses.items():
            clients[group_id] = await stack.enter_async_context(
                connect(address, queue=None, program=f"mrs bench status {group_id}")
            )
        return cls(servers, clients)

    async def _statuses(self) -> dict[int, dict]:
        statuses = {}
        with trio.fail_after(STATUS_WAIT_S):
            for group_id, client in self.clients.items():
                statuses[group_id] = await client.status()
        return statuses

    async def before(self) -> None:
        self.status_before = await self._statuses()
        self.cpu_before = {g: _process_cpu_s(pid) for g, pid in self.servers.pids.items()}
        self.client_cpu_before = time.process_time()
        self.started = time.perf_counter()

    def stop_clock(self) -> None:
        self.elapsed = time.perf_counter() - self.started
        self.cpu_after = {g: _process_cpu_s(pid) for g, pid in self.servers.pids.items()}
        self.client_cpu_after = time.process_time()

    async def after(self) -> None:
        self.status_after = await self._statuses()

    def writer_delta(self, group_id: int) -> dict:
        before = self.status_before[group_id]["writer"]
        after = self.status_after[group_id]["writer"]
        delta = {
            key: after[key] - before[key]
            for key in ("commits", "batches", "operations", "failed_batches")
        }
        commit_ms_total = (
            after["commit_time_ms_mean"] * after["commits"]
            - before["commit_time_ms_mean"] * before["commits"]
        )
        delta["commit_time_ms_mean"] = (
            round(commit_ms_total / delta["commits"], 3) if delta["commits"] else None
        )
        return delta

    def server_cpu_pct(self, group_id: int) -> float | None:
        before, after = self.cpu_before.get(group_id), self.cpu_after.get(group_id)
        if before is None or after is None or self.elapsed <= 0:
            return None
        return 100 * (after - before) / self.elapsed

    def fill(self, result: Result, dqf_group: int) -> Result:
        """Writer, CPU and DQF figures of a finished run, into `result`."""
        deltas = {str(g): self.writer_delta(g) for g in self.clients}
        delta = deltas[str(dqf_group)]
        by_group = {str(g): self.server_cpu_pct(g) for g in self.clients}
        result.dqf_group = dqf_group
        result.writer_delta = delta
        result.writer_deltas = deltas
        result.batches_per_commit = (
            delta["batches"] / delta["commits"] if delta["commits"] else None
        )
        result.server_cpu_pct_by_group = by_group
        result.server_cpu_pct = (
            None if any(v is None for v in by_group.values()) else sum(by_group.values())
        )
        result.client_cpu_pct = (
            100 * (self.client_cpu_after - self.client_cpu_before) / self.elapsed
            if self.elapsed > 0
            else None
        )
        result.dqf_messages_after = self.status_after[dqf_group].get("dqf_messages")
        if dqf_group != LOCAL_GROUP:
            link = self.status_after[LOCAL_GROUP].get("links", {}).get(str(dqf_group))
            result.route = "cross-group"
            result.link_after = link
        else:
            result.route = "same-group"
        return result


class _Failures:
    def __init__(self) -> None:
        self.count = 0
        self.first: list[str] = []

    def add(self, what: str) -> None:
        self.count += 1
        if not self.first:
            self.first.append(what)

    def report(self, phase: str) -> None:
        if self.first:
            print(
                f"mrs bench: {phase}: {self.count} failures, first: {self.first[0]}",
                file=sys.stderr,
            )


def _route_label(target_group: int) -> str:
    if target_group == LOCAL_GROUP:
        return ""
    return f", across the link {LOCAL_GROUP} -> {target_group}"


async def _put_phase(
    servers: Servers,
    connections: int,
    tasks_per_connection: int,
    seconds: float,
    body: bytes,
    target_group: int = LOCAL_GROUP,
) -> Result:
    """`connections` clients on group 1, each attached to its own sender queue, with
    `tasks_per_connection` tasks doing sequential WF_DQF puts on it to queue 10 of
    `target_group`, for `seconds`."""
    from clients import DeliveryMode, MrsError, Status, Uma, connect

    latencies: list[float] = []
    stored = [0]
    failures = _Failures()
    target = f"{target_group}.{TARGET_QUEUE}"
    address = servers.addresses[LOCAL_GROUP]
    start = trio.Event()
    timing: dict[str, float] = {}

    async def putter(client) -> None:
        await start.wait()
        deadline = timing["deadline"]
        perf = time.perf_counter
        while True:
            began = perf()
            if began >= deadline:
                return
            try:
                psb = await client.put(
                    body, target=target, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
                )
            except MrsError as error:
                failures.add(f"{type(error).__name__}: {error}")
                return
            latencies.append(perf() - began)
            if psb.status == Status.SUCCESS and psb.delivery_status == Status.STORED:
                stored[0] += 1
            else:
                failures.add(repr(psb))

    async def connection(index: int, *, task_status) -> None:
        queue = f"{LOCAL_GROUP}.{SENDER_QUEUE_FIRST + index}"
        async with (
            connect(address, queue=queue, program=f"mrs bench {index}") as client,
            trio.open_nursery() as nursery,
        ):
            for _ in range(tasks_per_connection):
                nursery.start_soon(putter, client)
            task_status.started()

    async with contextlib.AsyncExitStack() as stack:
        monitors = await _Monitors.open(servers, stack)
        async with trio.open_nursery() as nursery:
            for index in range(connections):
                await nursery.start(connection, index)
            await monitors.before()
            timing["deadline"] = monitors.started + seconds
            start.set()
        monitors.stop_clock()
        await monitors.after()

    failures.report("puts not stored")
    in_flight = connections * tasks_per_connection
    plural = "s" if connections != 1 else ""
    name = (
        f"WF_DQF puts, {connections} conn{plural} x {tasks_per_connection} in flight"
        f"{_route_label(target_group)}"
    )
    result = Result(
        name,
        "server",
        stored[0],
        monitors.elapsed,
        latencies,
        connections=connections,
        in_flight=in_flight,
        failures=failures.count,
        workload="put",
    )
    monitors.fill(result, target_group)
    result.msgs_per_commit = result.batches_per_commit
    return result


async def _end_to_end_phase(
    servers: Servers, target_group: int, seconds: float, body_bytes: int
) -> Result:
    """Producers on group 1 (4 connections x 32 tasks of sequential WF_DQF puts) and
    one consumer connection attached to queue 10 of `target_group`, on which 32 tasks
    each loop get -> confirm. Counts the messages whose confirm was answered within
    the window; the latency is from the start of the put to the confirm's answer."""
    from clients import (
        DeliveryMode,
        MrsError,
        MrsTimeout,
        NoMoreMessages,
        ReplyTimeout,
        Status,
        Uma,
        connect,
    )

    target = f"{target_group}.{TARGET_QUEUE}"
    latencies: list[float] = []
    counts = {"stored": 0, "confirmed": 0}
    put_failures, consume_failures = _Failures(), _Failures()
    timed = body_bytes >= _STAMP.size
    filler = os.urandom(body_bytes - _STAMP.size if timed else body_bytes)
    perf = time.perf_counter
    now = trio.current_time

    async def producer(client, deadline: float) -> None:
        while now() < deadline:
            body = _STAMP.pack(perf()) + filler if timed else filler
            try:
                psb = await client.put(
                    body, target=target, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
                )
            except MrsError as error:
                put_failures.add(f"{type(error).__name__}: {error}")
                return
            if psb.status == Status.SUCCESS and psb.delivery_status == Status.STORED:
                if now() <= deadline:
                    counts["stored"] += 1
            else:
                put_failures.add(repr(psb))

    async def consumer(client, deadline: float) -> None:
        while now() < deadline:
            try:
                message = await client.get(timeout=E2E_GET_TIMEOUT_S)
            except (MrsTimeout, ReplyTimeout, NoMoreMessages):
                continue
            except MrsError as error:
                consume_failures.add(f"get: {type(error).__name__}: {error}")
                return
            try:
                await client.confirm(message.seq)
            except MrsError as error:
                consume_failures.add(f"confirm: {type(error).__name__}: {error}")
                return
            if now() <= deadline:
                counts["confirmed"] += 1
                if timed:
                    latencies.append(perf() - _STAMP.unpack_from(message.body)[0])

    async with contextlib.AsyncExitStack() as stack:
        producers = []
        for index in range(E2E_PRODUCER_CONNECTIONS):
            producers.append(
                await stack.enter_async_context(
                    connect(
                        servers.addresses[LOCAL_GROUP],
                        queue=f"{LOCAL_GROUP}.{SENDER_QUEUE_FIRST + index}",
                        program=f"mrs bench producer {index}",
                    )
                )
            )
        consumer_client = await stack.enter_async_context(
            connect(servers.addresses[target_group], queue=target, program="mrs bench consumer")
        )
        monitors = await _Monitors.open(servers, stack)
        await monitors.before()
        deadline = now() + seconds
        # Whatever is still in flight at the deadline is cancelled and not counted.
        with trio.move_on_at(deadline):
            async with trio.open_nursery() as nursery:
                for client in producers:
                    for _ in range(E2E_PRODUCER_TASKS_PER_CONNECTION):
                        nursery.start_soon(producer, client, deadline)
                for _ in range(E2E_CONSUMER_TASKS):
                    nursery.start_soon(consumer, consumer_client, deadline)
        monitors.stop_clock()
        await monitors.after()

    put_failures.report("end-to-end puts not stored")
    consume_failures.report("end-to-end gets/confirms failed")
    route = "same group" if target_group == LOCAL_GROUP else "across the link"
    result = Result(
        f"put -> get -> confirm, {route} ({target})",
        "server",
        counts["confirmed"],
        seconds,
        latencies,
        connections=E2E_PRODUCER_CONNECTIONS,
        in_flight=E2E_PRODUCER_CONNECTIONS * E2E_PRODUCER_TASKS_PER_CONNECTION,
        failures=put_failures.count + consume_failures.count,
        workload="put-get-confirm",
        consumer_in_flight=E2E_CONSUMER_TASKS,
        puts_stored=counts["stored"],
    )
    return monitors.fill(result, target_group)


def _log_path(group_id: int, process: GroupProcess) -> Path:
    return process.log_path or process.config_path.parent / f"group{group_id}.log"


def _stop_all(processes: dict[int, GroupProcess], report: bool = True) -> None:
    """SIGTERM every running server and wait; report unclean exits. Raises on timeout
    (the caller kills what is left)."""
    for group_id, process in processes.items():
        if process.running:
            code = process.terminate(SERVER_STOP_TIMEOUT_S)
            if code != 0 and report:
                print(f"mrs bench: group {group_id} exited with code {code}", file=sys.stderr)


def _kill_all(processes: dict[int, GroupProcess]) -> None:
    for process in processes.values():
        with contextlib.suppress(Exception):
            if process.running:
                try:
                    process.terminate(SERVER_STOP_TIMEOUT_S)
                finally:
                    process.kill()  # a no-op once it has exited


async def _wait_link_up(address: str, peer: int) -> None:
    from clients import connect

    async with connect(address, queue=None, program="mrs bench link check") as client:
        with trio.fail_after(LINK_UP_WAIT_S):
            while (await client.status())["links"][str(peer)]["state"] != "up":
                await trio.sleep(0.02)


async def _run_phase(
    processes: dict[int, GroupProcess], bus: LinkedBus | None, phase: Phase
) -> Result:
    """Start the servers (and the link's proxy), run `phase`, stop the servers."""
    async with trio.open_nursery() as nursery:
        if bus is not None:
            await bus.start_proxies(nursery)
        try:
            # The highest group first: the lower one dials it, and finds it listening.
            for group_id in sorted(processes, reverse=True):
                await trio.to_thread.run_sync(processes[group_id].start)
            servers = Servers(
                {g: p.address for g, p in processes.items()},
                {g: p.process.pid for g, p in processes.items()},
            )
            if bus is not None:
                await _wait_link_up(servers.addresses[LOCAL_GROUP], REMOTE_GROUP)
            result = await phase(servers)
        except BaseException:
            # On Ctrl-C the servers got SIGINT too and may already be exiting: a
            # SIGTERM landing after their handler is gone is no failure worth a line.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_stop_all, processes, False)
            raise
        else:
            # Stop the servers while the link's proxy still runs, so the link does
            # not drop (and divert to the SAF) first.
            await trio.to_thread.run_sync(_stop_all, processes)
            return result
        finally:
            nursery.cancel_scope.cancel()


def _single(group: BaseExceptionGroup) -> BaseException:
    """The one exception inside nested groups; the group itself if there are several."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return group


def measure(directory: Path, *, linked: bool, senders: int, phase: Phase) -> Result:
    """Fresh servers on a fresh data directory (one group, or groups 1 and 2 with a
    link), `phase` against them, then stop them and remove the directory, whatever
    happens (also on Ctrl-C)."""
    directory.mkdir(parents=True)
    bus: LinkedBus | None = None
    processes: dict[int, GroupProcess] = {}
    try:
        if linked:
            bus = LinkedBus(directory, queues=_queues_toml(senders), limits=_limits_toml())
            processes = bus.processes
        else:
            processes = {LOCAL_GROUP: GroupProcess(_bench_config(directory, senders), 1)}
        try:
            return trio.run(_run_phase, processes, bus, phase)
        except BaseExceptionGroup as group:
            # Errors come out of trio's nurseries wrapped in groups; `mrs` exits 130
            # on a plain KeyboardInterrupt (Ctrl-C).
            if group.subgroup(KeyboardInterrupt) is not None:
                raise KeyboardInterrupt from None
            raise _single(group) from None
    except Exception:
        for group_id, process in processes.items():
            log_path = _log_path(group_id, process)
            if log_path.exists():
                tail = log_path.read_text(errors="replace")[-3000:]
                print(f"mrs bench: server log tail ({log_path}):\n{tail}", file=sys.stderr)
        raise
    finally:
        _kill_all(processes)
        shutil.rmtree(directory, ignore_errors=True)


def measure_server(
    directory: Path, connections: int, tasks_per_connection: int, seconds: float, body_bytes: int
) -> Result:
    """WF_DQF puts to queue 1.10 of one fresh `mrs serve`."""
    body = os.urandom(body_bytes)
    return measure(
        directory,
        linked=False,
        senders=connections,
        phase=lambda servers: _put_phase(servers, connections, tasks_per_connection, seconds, body),
    )


def measure_cross_group(
    directory: Path, connections: int, seconds: float, body_bytes: int
) -> Result:
    """WF_DQF puts from group 1 to queue 2.10, one in flight per connection."""
    body = os.urandom(body_bytes)
    return measure(
        directory,
        linked=True,
        senders=connections,
        phase=lambda servers: _put_phase(
            servers, connections, 1, seconds, body, target_group=REMOTE_GROUP
        ),
    )


def measure_end_to_end(
    directory: Path, target_group: int, seconds: float, body_bytes: int
) -> Result:
    """put -> get -> confirm to queue 10 of group 1 (one server) or group 2 (linked)."""
    return measure(
        directory,
        linked=target_group != LOCAL_GROUP,
        senders=E2E_PRODUCER_CONNECTIONS,
        phase=lambda servers: _end_to_end_phase(servers, target_group, seconds, body_bytes),
    )


# ---------------------------------------------------------------------- reporting
def _filesystem(path: Path) -> str:
    """The mount point, fs type and device holding `path` (Linux /proc/mounts)."""
    best = ("", "?", "?")
    try:
        resolved = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype = line.split()[:3]
            inside = resolved == mount or resolved.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best[0]):
                best = (mount, fstype, device)
    except (OSError, ValueError):
        return "?"
    return f"{best[1]} on {best[2]} (mounted at {best[0]})"


def machine_facts(scratch: Path) -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "disk_path": str(scratch.resolve()),
        "filesystem": _filesystem(scratch),
    }


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(value: float, base: float) -> float | None:
    return value / base if base > 0 else None


def same_group_counterpart(result: Result, results: list[Result]) -> Result | None:
    """The same-group row a cross-group row is compared with: same workload, same
    connections and puts in flight."""
    if result.route != "cross-group":
        return None
    for other in results:
        if (
            other.route == "same-group"
            and other.workload == result.workload
            and other.connections == result.connections
            and other.in_flight == result.in_flight
        ):
            return other
    return None


def display_order(results: list[Result]) -> list[Result]:
    """Measurement order, with each cross-group row right after its counterpart."""
    partners = {id(r): same_group_counterpart(r, results) for r in results}
    ordered: list[Result] = []
    for r in results:
        if r.route == "cross-group" and partners[id(r)] is not None:
            continue
        ordered.append(r)
        ordered.extend(c for c in results if partners[id(c)] is r)
    return ordered


def _cpu_cell(r: Result) -> str:
    if r.kind != "server":
        return "-"
    by_group = r.server_cpu_pct_by_group or {}
    if len(by_group) > 1:
        servers = "+".join(_fmt(by_group[g], 0) for g in sorted(by_group, key=int))
    else:
        servers = _fmt(r.server_cpu_pct, 0)
    return f"{servers}/{_fmt(r.client_cpu_pct, 0)}"


def report(results: list[Result], facts: dict, args: argparse.Namespace) -> None:
    fsync_rate = next(r.rate for r in results if r.kind == "fsync")
    lmdb_rate = next(r.rate for r in results if r.kind == "lmdb")
    same_ratio = {}
    for r in results:
        partner = same_group_counterpart(r, results)
        same_ratio[id(r)] = None if partner is None else _ratio(r.rate, partner.rate)
    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    console.print(
        f"[bold]mrs bench[/]: {facts['cpu_count']} CPUs, {facts['implementation']} "
        f"{facts['python']}, {facts['platform']}"
    )
    console.print(f"disk: {facts['disk_path']} - {facts['filesystem']}")
    console.print(
        f"{args.seconds:g} s per measurement, {args.body_bytes}-byte bodies; "
        "each server run starts on an empty DQF (fresh data directory)"
    )
    table = Table(title="Durable throughput vs. the disk's fsync rate")
    table.add_column("measurement")
    table.add_column("per second", justify="right")
    table.add_column("x raw fsync", justify="right")
    table.add_column("x LMDB 1 put/commit", justify="right")
    table.add_column("x same group", justify="right")
    table.add_column("batches/commit", justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("p99 ms", justify="right")
    table.add_column("CPU % srv/bench", justify="right")
    for r in display_order(results):
        table.add_row(
            r.name,
            _fmt(r.rate, 0),
            _fmt(_ratio(r.rate, fsync_rate)),
            _fmt(_ratio(r.rate, lmdb_rate)),
            _fmt(same_ratio[id(r)]),
            _fmt(r.batches_per_commit if r.kind == "server" else r.msgs_per_commit),
            _fmt(r.latency_ms(0.50), 3),
            _fmt(r.latency_ms(0.99), 3),
            _cpu_cell(r),
        )
    console.print(table)
    for r in display_order(results):
        if r.kind == "fsync":
            console.print(
                f"raw fsync mean latency: {_fmt(r.mean_latency_ms, 3)} ms ({r.count} fsyncs)"
            )
        if r.kind == "server" and r.writer_delta:
            d = r.writer_delta
            where = f"group {r.dqf_group}: " if r.route == "cross-group" else ""
            if r.workload == "put-get-confirm":
                console.print(
                    f"{r.name}: {r.count} confirmed in {r.elapsed_s:.2f} s of "
                    f"{r.puts_stored} puts stored, {r.dqf_messages_after} left in the DQF; "
                    f"{where}{d['commits']} commits, mean commit "
                    f"{_fmt(d['commit_time_ms_mean'], 3)} ms"
                )
            else:
                console.print(
                    f"{r.name}: {r.count} puts in {r.elapsed_s:.2f} s, {where}{d['commits']} "
                    f"commits, mean commit {_fmt(d['commit_time_ms_mean'], 3)} ms "
                    "(incl. GIL reacquire)"
                )
            link = r.link_after or {}
            if link.get("saf_backlog") or (link and link.get("state") != "up"):
                console.print(
                    f"[red]{r.name}: link {link.get('state')} with SAF backlog "
                    f"{link.get('saf_backlog')} at the end (the link dropped)[/]"
                )
        if r.failures:
            console.print(
                f"[red]{r.name}: {r.failures} requests failed or puts were not stored "
                "(not counted)[/]"
            )
    payload = {
        "machine": facts,
        "seconds": args.seconds,
        "body_bytes": args.body_bytes,
        "results": [
            {
                **{k: v for k, v in asdict(r).items() if k != "latencies_s"},
                "rate_per_s": round(r.rate, 1),
                "ratio_to_fsync": _round(_ratio(r.rate, fsync_rate), 3),
                "ratio_to_lmdb_commit": _round(_ratio(r.rate, lmdb_rate), 3),
                "ratio_to_same_group": _round(same_ratio[id(r)], 3),
                "p50_ms": _round(r.latency_ms(0.50), 3),
                "p99_ms": _round(r.latency_ms(0.99), 3),
                "mean_ms": _round(r.mean_latency_ms, 3),
                "elapsed_s": round(r.elapsed_s, 3),
                "msgs_per_commit": _round(r.msgs_per_commit, 2),
                "batches_per_commit": _round(r.batches_per_commit, 2),
                "server_cpu_pct": _round(r.server_cpu_pct, 1),
                "server_cpu_pct_by_group": (
                    None
                    if r.server_cpu_pct_by_group is None
                    else {g: _round(v, 1) for g, v in r.server_cpu_pct_by_group.items()}
                ),
                "client_cpu_pct": _round(r.client_cpu_pct, 1),
            }
            for r in display_order(results)
        ],
    }
    print("BENCH_JSON " + json.dumps(payload, separators=(",", ":")), flush=True)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


# ---------------------------------------------------------------------- entry point
def run_bench(args: argparse.Namespace) -> int:
    seconds = float(args.seconds)
    clients = list(args.clients or [1, 32])
    skip_cross_group = bool(getattr(args, "skip_cross_group", False))
    senders_max = SENDER_QUEUE_LAST - SENDER_QUEUE_FIRST + 1
    if seconds <= 0 or args.body_bytes < 0:
        print("mrs bench: --seconds must be > 0 and --body-bytes >= 0", file=sys.stderr)
        return 2
    if any(n < 1 or n > senders_max for n in clients):
        print(f"mrs bench: --clients must each be 1..{senders_max}", file=sys.stderr)
        return 2

    base = Path(args.scratch) if args.scratch is not None else Path.cwd() / ".bench"
    created_base = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=base))
    try:
        facts = machine_facts(work)
        results: list[Result] = []
        _progress(f"raw fsync on {work} for {seconds:g} s")
        results.append(measure_fsync(work, seconds))
        _progress(f"LMDB one synced commit per put for {seconds:g} s")
        results.append(measure_lmdb(work, seconds))
        phases = [(n, 1) for n in clients]
        phases.append((PIPELINE_CONNECTIONS, PIPELINE_TASKS_PER_CONNECTION))
        for index, (connections, tasks) in enumerate(phases):
            _progress(
                f"mrs serve: {connections} connection(s) x {tasks} in flight for {seconds:g} s"
            )
            results.append(
                measure_server(
                    work / f"server{index}", connections, tasks, seconds, args.body_bytes
                )
            )
        if not skip_cross_group:
            _progress(
                f"groups 1+2: {CROSS_GROUP_CONNECTIONS} connections x 1 in flight, "
                f"1 -> {REMOTE_GROUP}.{TARGET_QUEUE} for {seconds:g} s"
            )
            results.append(
                measure_cross_group(
                    work / "cross", CROSS_GROUP_CONNECTIONS, seconds, args.body_bytes
                )
            )
        targets = [LOCAL_GROUP] if skip_cross_group else [LOCAL_GROUP, REMOTE_GROUP]
        for target_group in targets:
            _progress(f"put -> get -> confirm via {target_group}.{TARGET_QUEUE} for {seconds:g} s")
            results.append(
                measure_end_to_end(
                    work / f"e2e{target_group}", target_group, seconds, args.body_bytes
                )
            )
        report(results, facts, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if created_base:
            with contextlib.suppress(OSError):
                base.rmdir()
    return 0


def _progress(text: str) -> None:
    print(f"mrs bench: {text} ...", file=sys.stderr, flush=True)
