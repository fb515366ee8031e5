"""`mrs sim`: the swarm of deterministic seeds and the real-process scenarios."""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from pathlib import Path

import trio
from rich.console import Console
from rich.table import Table

from mrs.testing.broken_builds import broken_build, switches_in
from mrs.testing.replication_builds import REPLICATION_SWITCHES
from sim.checker import PROBLEMS, History, Verdict, check
from sim.scenarios import run_scenario
from sim.simulation import replicated
from sim.swarm import WORKLOADS, run_seed


def run_swarm_command(args: argparse.Namespace) -> int:
    logging.disable(logging.CRITICAL)
    console = Console()
    unsafe = switches_in(args.unsafe)
    broken_build(unsafe - REPLICATION_SWITCHES)  # an unknown switch is refused in one
    replicated_run = getattr(args, "replicated", False) or bool(unsafe & REPLICATION_SWITCHES)
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    shape = WORKLOADS[getattr(args, "workload", "default")]
    if replicated_run:  # a replication switch needs the replicated group
        shape = replicated(shape)
    started_s = time.perf_counter()
    started_cpu_s = time.process_time()
    failing: list[tuple[int, Verdict]] = []
    totals: dict[str, int] = {}
    faults: dict[str, int] = {}
    observed: dict[str, int] = {}
    for seed in seeds:
        history, verdict = run_seed(seed, unsafe, shape)
        for key, value in verdict.counts().items():
            totals[key] = totals.get(key, 0) + value
        for kind, count in history.faults.items():
            faults[kind] = faults.get(kind, 0) + count
        for what, count in history.observed.items():
            observed[what] = observed.get(what, 0) + count
        if not verdict.ok:
            failing.append((seed, verdict))
        if args.history is not None and args.seed is not None:
            args.history.write_text(history.to_json())
    elapsed_s = time.perf_counter() - started_s
    cpu_s = time.process_time() - started_cpu_s
    table = _verdict_table(
        f"swarm: {len(seeds)} seeds in {elapsed_s:.1f} s ({len(seeds) / elapsed_s:.2f} seeds/s; "
        f"CPU {cpu_s:.1f} s, {len(seeds) / max(cpu_s, 1e-9):.2f} seeds per CPU-second)",
        totals,
    )
    console.print(table)
    console.print("faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())))
    console.print("statuses seen: " + ", ".join(f"{k} {v}" for k, v in sorted(observed.items())))
    for seed, verdict in failing[:20]:
        console.print(
            f"[red]seed {seed} failed[/]: {_problems(verdict)}\n"
            f"  replay: mrs sim swarm --seed {seed}"
            + (f" --unsafe {args.unsafe}" if args.unsafe else "")
            + (" --replicated" if replicated_run else "")
            + (
                f" --workload {args.workload}"
                if getattr(args, "workload", "default") != "default"
                else ""
            )
            + f" --history seed{seed}.json"
        )
    if failing:
        console.print(f"[bold red]{len(failing)} of {len(seeds)} seeds broke an invariant[/]")
        return 1
    console.print("[bold green]every seed kept every invariant[/]")
    return 0


def run_scenario_command(args: argparse.Namespace) -> int:
    """Run one scenario; a bus made in the temp directory is removed when every
    invariant held (it is what a failure is diagnosed from, so then it stays)."""
    console = Console()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix=f"mrs-sim-{args.scenario}-"))
    console.print(
        f"scenario {args.scenario}, seed {args.seed}, {args.seconds:g} s of faults, "
        f"bus in {scratch}"
    )
    code = _run_scenario_in(console, args, scratch)
    if code == 0 and args.scratch is None:
        shutil.rmtree(scratch, ignore_errors=True)
        console.print(f"removed {scratch} (pass --scratch DIR to keep the bus)")
    return code


def _run_scenario_in(console: Console, args: argparse.Namespace, scratch: Path) -> int:
    started_s = time.perf_counter()
    history: History = trio.run(run_scenario, args.scenario, args.seed, args.seconds, scratch)
    verdict = check(history)
    elapsed_s = time.perf_counter() - started_s
    console.print(_verdict_table(f"{args.scenario}: {elapsed_s:.1f} s", verdict.counts()))
    console.print(
        "faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(history.faults.items()))
    )
    kept = args.history is not None or args.scratch is not None or not verdict.ok
    history_path = args.history or scratch / "history.json"
    if kept:
        history_path.write_text(history.to_json())
    console.print(
        (f"history: {history_path}; " if kept else "") + f"reproduce the schedule: mrs sim run "
        f"{args.scenario} --seed {args.seed} --seconds {args.seconds:g}"
    )
    if not verdict.ok:
        console.print(f"[bold red]invariants broken[/]: {_problems(verdict)}")
        return 1
    console.print("[bold green]every invariant held[/]")
    return 0


def _verdict_table(title: str, counts: dict[str, int]) -> Table:
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("count", justify="right")
    for key, value in counts.items():
        must_be_zero = key not in ("sent", "acknowledged", "delivered")
        style = "bold red" if must_be_zero and value else ""
        table.add_row(key.replace("_", " "), f"[{style}]{value}[/]" if style else str(value))
    return table


def _problems(verdict: Verdict) -> str:
    parts = []
    for name in PROBLEMS:
        items = getattr(verdict, name)
        if items:
            parts.append(f"{name} {len(items)} (e.g. {items[0]})")
    return "; ".join(parts)
