"""Benchmark (not a test): `mrs audit` end to end, wall time and CPU of the process tree.

    .venv/bin/python benchmarks/audit_report.py [--records 10000] [--runs 3]
                                                [--scratch DIR] [--baseline CHECKOUT]

Writes a PCJ of `--records` confirmed messages (benchmarks/audit_scan.py's shape), then
runs `mrs audit --data-dir DIR --json` as a subprocess `--runs` times and reports per
run: wall seconds, CPU-seconds of the whole tree (the driver, the JVM, any Spark
Python worker: the figure the machine's load does not change), rows/s and rows per
CPU-second, and the load average. `--baseline CHECKOUT` runs the same command with
that checkout's `mrs` first on the path (e.g. `git archive main | tar -x -C DIR`), to
compare before and after on the same journal in the same minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from audit_scan import TreeMeter, make_journal  # noqa: E402

from mrs.tools.cli_support import OneLineParser, positive_int  # noqa: E402


def run_once(data_dir: Path, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the tree) of one `mrs audit --json`."""
    command = [sys.executable, "-m", "mrs", "audit", "--data-dir", str(data_dir), "--json"]
    with TreeMeter() as meter:
        started = time.perf_counter()
        done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
        wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mrs audit failed: {done.stderr[-2000:]}")
    return wall_s, meter.cpu_s


def main() -> None:
    """`--runs 0` printed a table of no rows and exited 0; a journal made in a
    temporary directory (no --scratch) was left in /tmp by every run, where no later
    run finds it again (a new name each time). With --scratch it is kept, and reused."""
    parser = OneLineParser(prog="audit_report.py", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=positive_int, default=10_000)
    parser.add_argument("--runs", type=positive_int, default=3)
    parser.add_argument("--scratch", type=Path, help="keep (and reuse) the journal here")
    parser.add_argument("--baseline", type=Path, help="a checkout to compare against")
    args = parser.parse_args()
    if args.scratch is not None:
        _report(args, args.scratch)
        return
    scratch = Path(tempfile.mkdtemp(prefix="mrs-audit-bench-"))
    try:
        _report(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _report(args: argparse.Namespace, scratch: Path) -> None:
    """Make (or find) the journal in `scratch`, then one table row per version and run."""
    data_dir = scratch / f"g{args.records}"
    if not (data_dir / "journals" / "data.mdb").exists():
        (data_dir / "journals").mkdir(parents=True, exist_ok=True)
        make_journal(data_dir / "journals", args.records)
    versions = [("this checkout", dict(os.environ))]
    if args.baseline is not None:
        baseline_env = {**os.environ, "PYTHONPATH": str(args.baseline.resolve())}
        versions.insert(0, (f"baseline {args.baseline}", baseline_env))
    print("| version | records | wall s | CPU s (tree) | rows/s | rows per CPU-s | load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for _ in range(args.runs):
        for label, env in versions:
            (scratch / "cwd").mkdir(exist_ok=True)
            load = os.getloadavg()[0]
            wall_s, cpu_s = run_once(data_dir, env, scratch / "cwd")
            print(f"| {label} | {args.records:,} | {wall_s:.1f} | {cpu_s:.1f} | "
                  f"{args.records / wall_s:,.0f} | {args.records / cpu_s:,.0f} | {load:.1f} |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
