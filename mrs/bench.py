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
   pipelined run of 4 connections x 32 tasks in flight on each.

Every figure is then reported as a ratio to (1) and (2): group commit is what lets
the server exceed both, and the ratio is what carries over from one machine to
another. Each server run starts on a fresh data directory, so every run begins with
an empty DQF (nothing is ever got during the bench, so the DQF only grows).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import trio
from rich.console import Console
from rich.table import Table

from journals import Journal, JournalStore, WriteBatch, queue_key
from sim.processes import GroupProcess, write_single_group_config

TARGET_QUEUE = 10
SENDER_QUEUE_FIRST = 100
SENDER_QUEUE_LAST = 999
LMDB_VALUE_BYTES = 1024
PIPELINE_CONNECTIONS = 4
PIPELINE_TASKS_PER_CONNECTION = 32
DQF_MESSAGES_MAX = 10_000_000
JOURNAL_BYTES_MAX = 8 << 30
"""LMDB map size of the bench server; the file is sparse, so this costs no disk."""
SERVER_STOP_TIMEOUT_S = 30.0
STATUS_WAIT_S = 30.0


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
    server_cpu_pct: float | None = None
    client_cpu_pct: float | None = None
    dqf_messages_after: int | None = None

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


# ---------------------------------------------------------------------- the server
def _bench_config(directory: Path, senders: int) -> Path:
    queues = [
        f"""
        [[group.queue]]
        id = {TARGET_QUEUE}
        name = "TARGET"
        messages_max = {DQF_MESSAGES_MAX}
        unconfirmed_max = {DQF_MESSAGES_MAX}
        """
    ]
    for index in range(senders):
        queues.append(f"""
        [[group.queue]]
        id = {SENDER_QUEUE_FIRST + index}
        name = "SENDER{index}"
        """)
    limits = textwrap.dedent(f"""\
        dqf_messages_max = {DQF_MESSAGES_MAX}
        journal_bytes_max = {JOURNAL_BYTES_MAX}
        """)
    return write_single_group_config(
        directory, queues="".join(textwrap.dedent(q) for q in queues), limits=limits
    )


def _process_cpu_s(pid: int) -> float | None:
    """utime + stime of a process in seconds (Linux /proc); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


async def _server_phase(
    address: str, pid: int, connections: int, tasks_per_connection: int, seconds: float, body: bytes
) -> Result:
    """`connections` clients, each attached to its own sender queue, with
    `tasks_per_connection` tasks doing sequential WF_DQF puts on it, for `seconds`."""
    from clients import DeliveryMode, MrsError, Status, Uma, connect

    latencies: list[float] = []
    counts = {"ok": 0, "failed": 0}
    first_failure: list[str] = []
    target = f"1.{TARGET_QUEUE}"
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
                counts["failed"] += 1
                if not first_failure:
                    first_failure.append(f"{type(error).__name__}: {error}")
                return
            latencies.append(perf() - began)
            if psb.status == Status.SUCCESS and psb.delivery_status == Status.STORED:
                counts["ok"] += 1
            else:
                counts["failed"] += 1
                if not first_failure:
                    first_failure.append(repr(psb))

    async def connection(index: int, *, task_status) -> None:
        queue = f"1.{SENDER_QUEUE_FIRST + index}"
        async with (
            connect(address, queue=queue, program=f"mrs bench {index}") as client,
            trio.open_nursery() as nursery,
        ):
            for _ in range(tasks_per_connection):
                nursery.start_soon(putter, client)
            task_status.started()

    async with connect(address, queue=None, program="mrs bench status") as monitor:
        async with trio.open_nursery() as nursery:
            for index in range(connections):
                await nursery.start(connection, index)
            with trio.fail_after(STATUS_WAIT_S):
                before = await monitor.status()
            server_cpu_before = _process_cpu_s(pid)
            client_cpu_before = time.process_time()
            timing["started"] = time.perf_counter()
            timing["deadline"] = timing["started"] + seconds
            start.set()
        elapsed = time.perf_counter() - timing["started"]
        server_cpu_after = _process_cpu_s(pid)
        client_cpu_after = time.process_time()
        with trio.fail_after(STATUS_WAIT_S):
            after = await monitor.status()

    if first_failure:
        print(
            f"mrs bench: {counts['failed']} puts not stored, first: {first_failure[0]}",
            file=sys.stderr,
        )
    writer_before, writer_after = before["writer"], after["writer"]
    delta = {
        key: writer_after[key] - writer_before[key]
        for key in ("commits", "batches", "operations", "failed_batches")
    }
    commit_ms_total = (
        writer_after["commit_time_ms_mean"] * writer_after["commits"]
        - writer_before["commit_time_ms_mean"] * writer_before["commits"]
    )
    delta["commit_time_ms_mean"] = (
        round(commit_ms_total / delta["commits"], 3) if delta["commits"] else None
    )
    in_flight = connections * tasks_per_connection
    if tasks_per_connection == 1:
        name = f"WF_DQF puts, {connections} conn{'s' if connections != 1 else ''} x 1 in flight"
    else:
        name = f"WF_DQF puts, {connections} conns x {tasks_per_connection} in flight"
    server_cpu = (
        None
        if server_cpu_before is None or server_cpu_after is None
        else 100 * (server_cpu_after - server_cpu_before) / elapsed
    )
    return Result(
        name,
        "server",
        counts["ok"],
        elapsed,
        latencies,
        connections=connections,
        in_flight=in_flight,
        failures=counts["failed"],
        msgs_per_commit=delta["batches"] / delta["commits"] if delta["commits"] else None,
        writer_delta=delta,
        server_cpu_pct=server_cpu,
        client_cpu_pct=100 * (client_cpu_after - client_cpu_before) / elapsed,
        dqf_messages_after=after.get("dqf_messages"),
    )


def measure_server(
    directory: Path, connections: int, tasks_per_connection: int, seconds: float, body_bytes: int
) -> Result:
    """Start a fresh `mrs serve` on its own data directory, measure, stop it."""
    directory.mkdir(parents=True)
    config = _bench_config(directory, connections)
    server = GroupProcess(config, 1)
    try:
        address = server.start()
        result = trio.run(
            _server_phase,
            address,
            server.process.pid,
            connections,
            tasks_per_connection,
            seconds,
            os.urandom(body_bytes),
        )
        code = server.terminate(SERVER_STOP_TIMEOUT_S)
        if code != 0:
            print(f"mrs bench: server exited with code {code}", file=sys.stderr)
        return result
    except Exception:
        log_path = directory / "group1.log"
        if log_path.exists():
            tail = log_path.read_text(errors="replace")[-3000:]
            print(f"mrs bench: server log tail ({log_path}):\n{tail}", file=sys.stderr)
        raise
    finally:
        if server.running:
            try:
                server.terminate(SERVER_STOP_TIMEOUT_S)
            finally:
                server.kill()  # a no-op once it has exited
        shutil.rmtree(directory, ignore_errors=True)


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


def report(results: list[Result], facts: dict, args: argparse.Namespace) -> None:
    fsync_rate = next(r.rate for r in results if r.kind == "fsync")
    lmdb_rate = next(r.rate for r in results if r.kind == "lmdb")
    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
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
    table.add_column("msgs/commit", justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("p99 ms", justify="right")
    table.add_column("CPU % srv/bench", justify="right")
    for r in results:
        cpu = "-"
        if r.kind == "server":
            cpu = f"{_fmt(r.server_cpu_pct, 0)}/{_fmt(r.client_cpu_pct, 0)}"
        table.add_row(
            r.name,
            _fmt(r.rate, 0),
            _fmt(_ratio(r.rate, fsync_rate)),
            _fmt(_ratio(r.rate, lmdb_rate)),
            _fmt(r.msgs_per_commit),
            _fmt(r.latency_ms(0.50), 3),
            _fmt(r.latency_ms(0.99), 3),
            cpu,
        )
    console.print(table)
    for r in results:
        if r.kind == "fsync":
            console.print(
                f"raw fsync mean latency: {_fmt(r.mean_latency_ms, 3)} ms ({r.count} fsyncs)"
            )
        if r.kind == "server" and r.writer_delta:
            d = r.writer_delta
            console.print(
                f"{r.name}: {r.count} puts in {r.elapsed_s:.2f} s, {d['commits']} commits, "
                f"mean commit {_fmt(d['commit_time_ms_mean'], 3)} ms (incl. GIL reacquire)"
            )
        if r.failures:
            console.print(
                f"[red]{r.name}: {r.failures} puts failed or were not stored (not counted)[/]"
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
                "p50_ms": _round(r.latency_ms(0.50), 3),
                "p99_ms": _round(r.latency_ms(0.99), 3),
                "mean_ms": _round(r.mean_latency_ms, 3),
                "elapsed_s": round(r.elapsed_s, 3),
                "msgs_per_commit": _round(r.msgs_per_commit, 2),
                "server_cpu_pct": _round(r.server_cpu_pct, 1),
                "client_cpu_pct": _round(r.client_cpu_pct, 1),
            }
            for r in results
        ],
    }
    print("BENCH_JSON " + json.dumps(payload, separators=(",", ":")), flush=True)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


# ---------------------------------------------------------------------- entry point
def run_bench(args: argparse.Namespace) -> int:
    seconds = float(args.seconds)
    clients = list(args.clients or [1, 32])
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
        report(results, facts, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if created_base:
            with contextlib.suppress(OSError):
                base.rmdir()
    return 0


def _progress(text: str) -> None:
    print(f"mrs bench: {text} ...", file=sys.stderr, flush=True)
