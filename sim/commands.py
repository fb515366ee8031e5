"""`mrs sim`: the swarm of deterministic seeds and the real-process scenarios."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import trio
from rich.console import Console
from rich.table import Table

from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.offline.stop_signals import stop_signals_as_ctrl_c
from mrs.testing.broken_builds import broken_build, switches_in
from mrs.testing.replication_builds import REPLICATION_SWITCHES
from sim.checker import PROBLEMS, History, Verdict, check
from sim.processes import ServerStartError, first_start_failure
from sim.scenarios import run_scenario
from sim.simulation import replicated
from sim.swarm import WORKLOADS, run_seed

T = TypeVar("T")
SCENARIO_MADE = ("bus", "history.json")
"""What `mrs sim run` makes in its --scratch directory."""
SEEDS_BY_DEFAULT = 200
"""`mrs sim swarm` without --seeds: how many seeds it runs."""
FAILING_SHOWN = 20
"""Failing seeds a swarm describes, each with its replay line."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What stops a run of real processes: Ctrl-C, `kill`, and a closed terminal (its
`mrs serve` processes take SIGHUP as "reload" and would outlive the harness)."""


async def until_signalled(
    run: Callable[..., Awaitable[T]], *args: Any
) -> tuple[T | None, signal.Signals | None]:
    """`run(*args)`'s result, or the signal of STOP_SIGNALS that stopped it first. The
    signal cancels `run`, so its `finally` blocks stop the processes it started:
    SIGTERM's or SIGHUP's default would end this process at once and leave every
    `mrs serve` it started running, reparented to init.

    A handler of its own, not trio's signal receiver: the receiver raised again, as
    it closed, a signal it had not handed out, so a second Ctrl-C while the servers
    stopped (a tester's usual impatience) ended the command with no word of the
    signal or of where the bus stays, and a second SIGTERM killed it outright. Here
    every stop signal is noted at once and the ones after the first do nothing more."""
    results: list[T] = []
    caught: list[signal.Signals] = []
    stops = [each for each in STOP_SIGNALS if signal.getsignal(each) != signal.SIG_IGN]
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as running:

        def stop(signum: int, frame: FrameType | None) -> None:
            caught.append(signal.Signals(signum))  # run_sync_soon is signal-safe
            token.run_sync_soon(running.cancel, idempotent=True)

        previous = {each: signal.signal(each, stop) for each in stops}
        try:
            results.append(await run(*args))
        finally:
            for each, handler in previous.items():
                signal.signal(each, handler)
    return (results[0] if results else None), (caught[0] if caught else None)


def run_processes(
    run: Callable[..., Awaitable[T]], scratch: Path, *args: Any
) -> tuple[T | None, signal.Signals | None]:
    """`trio.run(until_signalled, run, *args)` for a run of real processes in
    `scratch`; a process that did not start is one line with its own last words,
    not "unexpected error: ExceptionGroup" (the trio nursery's group that carries it)."""
    try:
        return trio.run(until_signalled, run, *args)
    except* ServerStartError as failed:
        first = first_start_failure(failed)
        assert first is not None
        raise CommandError(f"{first.last_words()} (the bus stays in {scratch})") from None


def interrupted_code(signum: signal.Signals) -> int:
    """The shell's exit code for a command ended by `signum` (130 for Ctrl-C)."""
    return 128 + int(signum)


@dataclass
class SwarmTotals:
    """What the seeds run so far add up to."""

    seeds_run: int = 0
    totals: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    observed: dict[str, int] = field(default_factory=dict)
    failing: list[tuple[int, Verdict]] = field(default_factory=list)
    raised: list[tuple[int, str]] = field(default_factory=list)
    """Seeds whose run raised, and the error (its type and words)."""

    def add(self, seed: int, history: History, verdict: Verdict) -> None:
        self.seeds_run += 1
        for into, counts in (
            (self.totals, verdict.counts()),
            (self.faults, history.faults),
            (self.observed, history.observed),
        ):
            for key, value in counts.items():
                into[key] = into.get(key, 0) + value
        if not verdict.ok:
            self.failing.append((seed, verdict))

    def add_raised(self, seed: int, error: Exception) -> None:
        """A seed whose run raised: a crash of the code under test (or of the harness)
        is that seed's finding, told with its number and replay line. It ended the
        swarm as "unexpected error", with no seed to replay and no table of the
        seeds run before it."""
        self.seeds_run += 1
        self.raised.append((seed, _error_words(error)))


def run_swarm_command(args: argparse.Namespace) -> int:
    """Run the seeds and print what they add up to, also when SIGINT or SIGTERM stops
    the swarm early: the seeds run by then, and the replay line of each that failed."""
    logging.disable(logging.CRITICAL)
    console = Console()
    unsafe = _checked_swarm_args(args)
    replicated_run = getattr(args, "replicated", False) or bool(unsafe & REPLICATION_SWITCHES)
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    seeds_asked = 1 if args.seed is not None else args.seeds  # len(range) stops at 2**63
    shape = WORKLOADS[getattr(args, "workload", "default")]
    if replicated_run:  # a replication switch needs the replicated group
        shape = replicated(shape)
    started_s = time.perf_counter()
    started_cpu_s = time.process_time()
    done = SwarmTotals()
    interrupted: signal.Signals | None = None
    # SIGTERM and SIGHUP stop it as Ctrl-C does, so they too end with the summary
    # (and the seed's scratch directory removed)
    with stop_signals_as_ctrl_c() as stopped_by:
        try:
            for seed in seeds:
                try:
                    history, verdict = run_seed(seed, unsafe, shape)
                except Exception as error:  # noqa: BLE001 - that seed's finding: told, and on
                    done.add_raised(seed, error)
                    if getattr(args, "verbose", False):  # the replay line asks for it
                        traceback.print_exception(error)
                    continue
                done.add(seed, history, verdict)
                if args.history is not None:
                    args.history.write_text(history.to_json())
        except* KeyboardInterrupt:  # also inside the group a trio nursery raises
            interrupted = stopped_by[0] if stopped_by else signal.SIGINT
    elapsed_s = time.perf_counter() - started_s
    cpu_s = time.process_time() - started_cpu_s
    console.print(
        _verdict_table(
            f"swarm: {done.seeds_run} seeds in {elapsed_s:.1f} s "
            f"({done.seeds_run / elapsed_s:.2f} seeds/s; CPU {cpu_s:.1f} s, "
            f"{done.seeds_run / max(cpu_s, 1e-9):.2f} seeds per CPU-second)",
            done.totals,
        )
    )
    console.print("faults injected: " + _listed(done.faults))
    console.print("statuses seen: " + _listed(done.observed))
    _print_failing(console, args, done.failing, replicated_run)
    _print_raised(console, args, done.raised, replicated_run)
    raised = f", {len(done.raised)} raised an error" if done.raised else ""
    if interrupted is not None:
        console.print(
            f"[bold red]interrupted by {interrupted.name}[/]: {done.seeds_run} of "
            f"{seeds_asked} seeds run, {len(done.failing)} broke an invariant{raised}"
        )
        return interrupted_code(interrupted)
    if done.failing or done.raised:
        console.print(
            f"[bold red]{len(done.failing)} of {seeds_asked} seeds broke an invariant{raised}[/]"
        )
        return 1
    console.print("[bold green]every seed kept every invariant[/]")
    return 0


def _checked_swarm_args(args: argparse.Namespace) -> frozenset[str]:
    """The --unsafe switches, once every mistake in the arguments is refused in one
    line (before a run of minutes)."""
    unsafe = switches_in(args.unsafe)
    # an unknown switch is refused in one line that lists both kinds
    broken_build(unsafe - REPLICATION_SWITCHES, also_known=REPLICATION_SWITCHES)
    if args.history is not None and args.seed is None:
        raise CommandError("--history writes one seed's history: give --seed too", EXIT_USAGE)
    refuse_unwritable("--history", args.history)
    if args.seed is not None and (args.seeds is not None or args.first is not None):
        given = "--seeds" if args.seeds is not None else "--first"
        raise CommandError(
            f"--seed replays one seed and {given} sets a range: give one or the other "
            "(a range's seeds run from --first, 0 if not given, for --seeds, 200 if not given)",
            EXIT_USAGE,
        )
    refuse_negative_seed("--seed", args.seed)
    refuse_negative_seed("--first", args.first)
    args.seeds = SEEDS_BY_DEFAULT if args.seeds is None else args.seeds
    args.first = 0 if args.first is None else args.first
    return unsafe


def _print_failing(
    console: Console,
    args: argparse.Namespace,
    failing: list[tuple[int, Verdict]],
    replicated_run: bool,
) -> None:
    """What broke in the first FAILING_SHOWN failing seeds and how to replay each; the
    numbers of the others on one line (they were left out without a word, so a tester
    took the seeds listed for every seed that failed)."""
    for seed, verdict in failing[:FAILING_SHOWN]:
        console.print(f"[red]seed {seed} failed[/]: {_problems(verdict)}")
        console.print(f"  replay: {_replay_line(args, seed, replicated_run)}", soft_wrap=True)
    if len(failing) > FAILING_SHOWN:
        others = " ".join(str(seed) for seed, _ in failing[FAILING_SHOWN:])
        console.print(f"{len(failing) - FAILING_SHOWN} more seeds failed: {others}")


def _print_raised(
    console: Console, args: argparse.Namespace, raised: list[tuple[int, str]], replicated_run: bool
) -> None:
    """Each seed whose run raised, its error and the line that replays it with the
    traceback (-v); as for failing seeds, the first FAILING_SHOWN, then the numbers."""
    for seed, words in raised[:FAILING_SHOWN]:
        console.print(f"[red]seed {seed} raised[/] {words}")
        console.print(f"  replay: {_replay_line(args, seed, replicated_run)} -v", soft_wrap=True)
    if len(raised) > FAILING_SHOWN:
        others = " ".join(str(seed) for seed, _ in raised[FAILING_SHOWN:])
        console.print(f"{len(raised) - FAILING_SHOWN} more seeds raised: {others}")


def _error_words(error: BaseException) -> str:
    """ "TYPE: words" of the error itself, not of the trio nursery's group carrying it."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"


def _listed(counts: dict[str, int]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counts.items()))


def _replay_line(args: argparse.Namespace, seed: int, replicated_run: bool) -> str:
    """The command that replays `seed` as the swarm ran it (one line, never wrapped:
    it is pasted into a shell)."""
    workload = getattr(args, "workload", "default")
    return (
        f"mrs sim swarm --seed {seed}"
        + (f" --unsafe {args.unsafe}" if args.unsafe else "")
        + (" --replicated" if replicated_run else "")
        + (f" --workload {workload}" if workload != "default" else "")
        + f" --history seed{seed}.json"
    )


def refuse_negative_seed(option: str, seed: int | None) -> None:
    """Refuse a seed below 0: `random.Random` seeds with the number's absolute value,
    so seed -7 replayed seed 7 byte for byte, and `--first -100 --seeds 200` counted
    200 seeds having run 101 distinct ones."""
    if seed is not None and seed < 0:
        raise CommandError(
            f"{option} {seed}: seeds are whole numbers >= 0 (seed -N would replay seed N)",
            EXIT_USAGE,
        )


def refuse_unwritable(option: str, path: Path | None) -> None:
    """Refuse, before a run of minutes, an output file it could not write at its end
    (the write would fail there and hide the run's verdict)."""
    if path is None:
        return
    folder = path.parent
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise CommandError(
            f"{option} {path}: cannot write a file there "
            + ("(a directory)" if path.is_dir() else f"({folder} is not a writable directory)"),
            EXIT_USAGE,
        )


def refuse_used_scratch(scratch: Path, made_by_a_run: tuple[str, ...]) -> None:
    """Refuse a --scratch that is not a directory, or that holds what an earlier run
    made there: its journals would be judged as this run's (messages no one sent,
    duplicates, redeliveries after a confirm: violations the server never made)."""
    if scratch.exists() and not scratch.is_dir():
        raise CommandError(f"--scratch {scratch}: not a directory", EXIT_USAGE)
    for name in made_by_a_run:
        if (scratch / name).exists():
            raise CommandError(
                f"--scratch {scratch} holds an earlier run's bus ({scratch / name}), which "
                "would be judged as this run's: give a new or empty directory",
                EXIT_USAGE,
            )


def claim_scratch(scratch: Path, made_by_a_run: tuple[str, ...]) -> None:
    """`refuse_used_scratch`, then make the first thing a run makes there at once, so
    a second run given the same --scratch at the same moment is refused too: both
    passed the check, and the second rewrote the bus file under the first (new
    ports), which then hung until killed."""
    refuse_used_scratch(scratch, made_by_a_run)
    try:  # a path the tester got wrong is named as the option's, exit 2
        scratch.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CommandError(
            f"--scratch {scratch}: cannot make the directory ({error.strerror or error})",
            EXIT_USAGE,
        ) from None
    try:
        (scratch / made_by_a_run[0]).mkdir()
    except FileExistsError:
        raise CommandError(
            f"--scratch {scratch} is being used by another run: give a new or empty directory",
            EXIT_USAGE,
        ) from None


def run_scenario_command(args: argparse.Namespace) -> int:
    """Run one scenario; a bus made in the temp directory is removed when every
    invariant held (it is what a failure is diagnosed from, so then it stays)."""
    console = Console()
    refuse_unwritable("--history", args.history)
    refuse_negative_seed("--seed", args.seed)
    if args.scratch is not None:
        claim_scratch(args.scratch, SCENARIO_MADE)
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
    history, signum = run_processes(
        run_scenario, scratch, args.scenario, args.seed, args.seconds, scratch
    )
    if history is None:
        assert signum is not None
        console.print(
            f"[bold red]interrupted by {signum.name}[/] after "
            f"{time.perf_counter() - started_s:.1f} s: the bus's processes are stopped; "
            f"no verdict (the run did not reach its drain); the bus stays in {scratch}"
        )
        return interrupted_code(signum)
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
    if kept:
        console.print(f"history: {history_path}")
    console.print(  # one line, never wrapped: it is pasted into a shell
        f"reproduce the schedule: mrs sim run {args.scenario} --seed {args.seed} "
        f"--seconds {args.seconds:g}",
        soft_wrap=True,
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
