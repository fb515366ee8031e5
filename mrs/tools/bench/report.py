"""The bench's report: a table of every figure as a ratio to the disk's ceilings.

Part of `mrs bench` (see mrs/tools/bench/__init__.py for what it measures and why).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mrs.tools.bench.results import Result
from mrs.tools.console import ToolConsole


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


def wf_counterpart(result: Result, results: list[Result]) -> Result | None:
    """The WF_DQF put row an AK row is compared with: same connections and window."""
    if result.workload != "put-ak":
        return None
    for other in results:
        if (
            other.workload == "put"
            and other.route == "same-group"
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


@dataclass(frozen=True)
class _Bases:
    """What each figure is divided by: the disk's ceilings and its same-group partner."""

    fsync_rate: float
    lmdb_rate: float
    same_ratio: dict[int, float | None]
    wf_ratio: dict[int, float | None]
    """AK rows: the rate over the WF row of the same window."""

    @classmethod
    def of(cls, results: list[Result]) -> _Bases:
        same_ratio, wf_ratio = {}, {}
        for r in results:
            partner = same_group_counterpart(r, results)
            same_ratio[id(r)] = None if partner is None else _ratio(r.rate, partner.rate)
            wf = wf_counterpart(r, results)
            wf_ratio[id(r)] = None if wf is None else _ratio(r.rate, wf.rate)
        return cls(
            next(r.rate for r in results if r.kind == "fsync"),
            next(r.rate for r in results if r.kind == "lmdb"),
            same_ratio,
            wf_ratio,
        )


def report(results: list[Result], facts: dict, args: argparse.Namespace) -> None:
    """The table, a note per figure, and one BENCH_JSON line for scripts."""
    bases = _Bases.of(results)
    console = ToolConsole()
    if not console.is_terminal:
        console = ToolConsole(width=170)
    console.print(
        f"[bold]mrs bench[/]: {facts['cpu_count']} CPUs, {facts['implementation']} "
        f"{facts['python']}, {facts['platform']}"
    )
    console.print(f"disk: {facts['disk_path']} - {facts['filesystem']}")
    console.print(
        f"{args.seconds:g} s per measurement, {args.body_bytes}-byte bodies; "
        "each server run starts on an empty DQF (fresh data directory)"
    )
    console.print(_table(results, bases))
    for r in display_order(results):
        _print_notes(console, r)
        if bases.wf_ratio[id(r)] is not None:
            console.print(
                f"{r.name}: {_fmt(bases.wf_ratio[id(r)])} x the WF_DQF puts of the "
                "same window (durable answers by MRS_ACK against PutDone)"
            )
    payload = {
        "machine": facts,
        "seconds": args.seconds,
        "body_bytes": args.body_bytes,
        "results": [_json_row(r, bases) for r in display_order(results)],
    }
    print("BENCH_JSON " + json.dumps(payload, separators=(",", ":")), flush=True)


def _table(results: list[Result], bases: _Bases) -> Table:
    table = Table(title="Durable throughput vs. the disk's fsync rate")
    table.add_column("measurement")
    for column in (
        "per second",
        "x raw fsync",
        "x LMDB 1 put/commit",
        "x same group",
        "batches/commit",
        "p50 ms",
        "p99 ms",
        "CPU % srv/bench",
    ):
        table.add_column(column, justify="right")
    for r in display_order(results):
        table.add_row(
            r.name,
            _fmt(r.rate, 0),
            _fmt(_ratio(r.rate, bases.fsync_rate)),
            _fmt(_ratio(r.rate, bases.lmdb_rate)),
            _fmt(bases.same_ratio[id(r)]),
            _fmt(_per_commit(r)),
            _fmt(r.latency_ms(0.50), 3),
            _fmt(r.latency_ms(0.99), 3),
            _cpu_cell(r),
        )
    return table


def _per_commit(r: Result) -> float | None:
    """The batches/commit column: messages per commit for the disk rows and put rows
    (each put one batch, as benchmarks/README.md reads it), the writer's batches per
    commit for put -> get -> confirm rows (three batches a message)."""
    if r.kind == "server" and r.workload == "put-get-confirm":
        return r.batches_per_commit
    return r.msgs_per_commit


def _print_notes(console: Console, r: Result) -> None:
    """The lines under the table: fsync latency, commits per run, a dropped link,
    failures."""
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


def _json_row(r: Result, bases: _Bases) -> dict:
    return {
        **{k: v for k, v in asdict(r).items() if k not in ("latencies_s", "first_failure")},
        "rate_per_s": round(r.rate, 1),
        "ratio_to_fsync": _round(_ratio(r.rate, bases.fsync_rate), 3),
        "ratio_to_lmdb_commit": _round(_ratio(r.rate, bases.lmdb_rate), 3),
        "ratio_to_same_group": _round(bases.same_ratio[id(r)], 3),
        "ratio_to_wf": _round(bases.wf_ratio[id(r)], 3),
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


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
