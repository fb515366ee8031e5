"""The bench's servers: config, processes, the CPU and writer monitors, failures.

Part of `mrs bench` (see mrs/tools/bench/__init__.py for what it measures and why).
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from mrs.config.guards import Guards
from mrs.tools.bench.results import (
    DQF_MESSAGES_MAX,
    JOURNAL_BYTES_MAX,
    LOCAL_GROUP,
    SENDER_QUEUE_FIRST,
    STATUS_WAIT_S,
    TARGET_QUEUE,
    TARGET_UNCONFIRMED_MAX,
    Result,
)
from sim.processes import write_single_group_config

BENCH_CONNECTIONS_EXTRA = 16
"""Connections of a row besides its clients: the status monitor, with room to spare."""


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


def _guards_toml(senders: int) -> str:
    """Room for every client of the row to connect at once from 127.0.0.1. Why: the
    default accept_burst (500) refused the connections of `--clients` 600 to 900 (all
    documented as valid) EXCEEDQUOTA, and the bench ended in "unexpected error"."""
    burst = max(Guards().accept_burst, senders + BENCH_CONNECTIONS_EXTRA)
    return f"[group.guards]\naccept_burst = {burst}\n"


def _bench_config(directory: Path, senders: int) -> Path:
    return write_single_group_config(
        directory,
        queues=_queues_toml(senders),
        group_extra=_guards_toml(senders),
        limits=_limits_toml(),
    )


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

    async def start_connections(
        self, nursery: trio.Nursery, connection: Callable, connections: int, seconds: float
    ) -> float:
        """Start `connections` client connections (`nursery.start(connection, index)`),
        take the readings before, and return the window's deadline (perf_counter)."""
        for index in range(connections):
            await nursery.start(connection, index)
        await self.before()
        return self.started + seconds

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

    def msgs_per_commit(self, group_id: int) -> float | None:
        """Messages the group's DQF gained per synced commit over the run: a put row's
        messages per commit. Its writer's batches per commit is not that across the
        link, where group 2 also commits batches of its own (954 batches for 891
        messages at 32 connections, 427 for 298 at 4), so the row overstated how many
        of its puts shared a commit."""
        before = self.status_before[group_id].get("dqf_messages")
        after = self.status_after[group_id].get("dqf_messages")
        commits = self.writer_delta(group_id)["commits"]
        if before is None or after is None or not commits:
            return None
        return (after - before) / commits

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


def psb_text(psb) -> str:
    """A refused put's answer in a few words (its repr is a line of enum reprs)."""
    return f"answered ({psb.status.name}, {psb.delivery_status.name})"


class _Failures:
    def __init__(self) -> None:
        self.count = 0
        self.first: list[str] = []

    def add(self, what: str) -> None:
        self.count += 1
        if not self.first:
            self.first.append(what)

    @property
    def first_text(self) -> str:
        return self.first[0] if self.first else ""

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
