"""`mrs bench`: measure the disk, then the servers, then print the report.

Part of `mrs bench` (see mrs/tools/bench/__init__.py for what it measures and why).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from journals import JournalDeviceError
from mrs.exit_status import CommandError
from mrs.tools.bench.disk import measure_fsync, measure_lmdb
from mrs.tools.bench.report import machine_facts, report
from mrs.tools.bench.results import (
    CROSS_GROUP_CONNECTIONS,
    LOCAL_GROUP,
    PIPELINE_CONNECTIONS,
    PIPELINE_TASKS_PER_CONNECTION,
    REMOTE_GROUP,
    SENDER_QUEUE_FIRST,
    SENDER_QUEUE_LAST,
    TARGET_QUEUE,
    Result,
)
from mrs.tools.bench.runner import measure_cross_group, measure_end_to_end, measure_server
from mrs.tools.cli_support import made_scratch

SECONDS_MAX = 3600.0
"""Per measurement at most: the run takes (7 + client counts) times it. Why: --seconds
1e300 (nan and inf were refused) started a run that never reported."""


def run_bench(args: argparse.Namespace) -> int:
    seconds = float(args.seconds)
    clients = list(args.clients or [1, 32])
    skip_cross_group = bool(getattr(args, "skip_cross_group", False))
    senders_max = SENDER_QUEUE_LAST - SENDER_QUEUE_FIRST + 1
    if seconds <= 0 or args.body_bytes < 0:
        print("mrs bench: --seconds must be > 0 and --body-bytes >= 0", file=sys.stderr)
        return 2
    if seconds > SECONDS_MAX:
        print(
            f"mrs bench: --seconds must be at most {SECONDS_MAX:,.0f} (per measurement), "
            f"got {seconds:g}",
            file=sys.stderr,
        )
        return 2
    if any(n < 1 or n > senders_max for n in clients):
        print(f"mrs bench: --clients must each be 1..{senders_max}", file=sys.stderr)
        return 2

    base = Path(args.scratch) if args.scratch is not None else Path.cwd() / ".bench"
    created_base = made_scratch(base)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=base))
    try:
        facts = machine_facts(work)
        results: list[Result] = []
        _progress(f"raw fsync on {work} for {seconds:g} s")
        results.append(_disk_phase("raw fsync", measure_fsync, work, seconds))
        _progress(f"LMDB one synced commit per put for {seconds:g} s")
        results.append(_disk_phase("LMDB synced commits", measure_lmdb, work, seconds))
        results.extend(_same_group_puts(work, clients, seconds, args.body_bytes))
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


def _disk_phase(
    what: str, measure: Callable[[Path, float], Result], work: Path, seconds: float
) -> Result:
    """A disk measurement; the disk failing it (ENOSPC on a full one) is one line
    naming the measurement and the directory, not an "unexpected error"."""
    try:
        return measure(work, seconds)
    except JournalDeviceError as error:
        raise CommandError(f"bench stopped: {what} in {work}: {error}") from None
    except OSError as error:
        problem = error.strerror or str(error)
        raise CommandError(f"bench stopped: {what} in {work}: {problem}") from None


def _same_group_puts(
    work: Path, clients: list[int], seconds: float, body_bytes: int
) -> list[Result]:
    """WF_DQF puts for each client count, pipelined, then AK_DQF puts in the
    pipelined shape (each row on a fresh server)."""
    results: list[Result] = []
    phases = [(n, 1) for n in clients]
    phases.append((PIPELINE_CONNECTIONS, PIPELINE_TASKS_PER_CONNECTION))
    for index, (connections, tasks) in enumerate(phases):
        _progress(f"mrs serve: {connections} connection(s) x {tasks} in flight for {seconds:g} s")
        results.append(
            measure_server(work / f"server{index}", connections, tasks, seconds, body_bytes)
        )
    _progress(
        f"mrs serve: AK_DQF puts, {PIPELINE_CONNECTIONS} connection(s) x "
        f"{PIPELINE_TASKS_PER_CONNECTION} unacknowledged for {seconds:g} s"
    )
    results.append(
        measure_server(
            work / "ak",
            PIPELINE_CONNECTIONS,
            PIPELINE_TASKS_PER_CONNECTION,
            seconds,
            body_bytes,
            ak=True,
        )
    )
    return results


def _progress(text: str) -> None:
    print(f"mrs bench: {text} ...", file=sys.stderr, flush=True)
