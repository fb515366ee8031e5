"""The last act of `mrs demo`: Spark audits the journals the demo just wrote.

A few lines on the terminal (what Spark counted, checked against the demo's own
tally) and the path of the HTML report. Without Java the demo still stands: the
audit says why it was skipped and how to get it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console


def run_demo_audit(
    console: Console,
    config_path: Path,
    out_dir: Path | None,
    pcj_expected: int,
    memory_puts: int,
    resent_copies: int,
) -> int:
    """Audit groups 1 and 2 of the demo bus into out_dir (None: a new temporary
    directory, made only once Java is found: a skipped audit left an empty one in
    /tmp on every run); 0 if Spark's counts agree with the demo's (`_summary`), else 1.

    `memory_puts`: the demo's NN_MEM puts. Each took a seq counter that no journal
    holds, so the audit's `missing` counts them; the summary says which counters are
    theirs, so a reader does not take them for lost orders (the demo's own table
    checks those). `resent_copies`: the second copies the demo's table spotted by
    correlation id."""
    from mrs.audit.command import AuditUsageError, check_java

    try:
        check_java()
    except AuditUsageError as error:
        console.print(f"[yellow]8. Audit skipped[/]: {error}")
        return 0
    from mrs.audit.output import write_html, write_json, write_tables

    console.print("[bold]8. Audit[/]: Spark (local[2]) reads both groups' journals ...")
    made = out_dir is None
    out_dir = Path(tempfile.mkdtemp(prefix="mrs-demo-audit-")) if out_dir is None else out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        report = _spark_report(config_path, out_dir)
    except BaseException:
        if made:  # no report in it: nothing to keep
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    write_tables(report, out_dir)
    write_json(report, out_dir / "report.json")
    page = write_html(report, out_dir / "report.html", "MRS demo audit",
                      f"the journals of {config_path}")  # fmt: skip
    return _summary(console, report, page, pcj_expected, memory_puts, resent_copies)


def _summary(
    console: Console,
    report: Any,
    page: Path,
    pcj_expected: int,
    memory_puts: int,
    resent_copies: int,
) -> int:
    """Print what Spark counted; 0 if its confirmed messages equal the PCJ records
    the demo counted and its second copies by correlation id the ones the demo's
    table showed, else 1.

    Why the correlation count: a SIGKILL that cuts off the answers of stored puts
    makes the demo re-send them, and its table shows "second copies spotted by
    correlation id 8"; the audit printed only "duplicates 0" (no message journaled
    twice, which is true) and then "agrees", though Spark had counted those copies."""
    totals = report.totals
    for row in report.tables["latency"]:
        console.print(
            f"   confirm latency {row.get('target_name') or row['target']}: "
            f"p50 {row['p50_ms']:.1f} ms, "
            f"p95 {row['p95_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms ({row['messages']} messages; "
            "put to confirm, mostly the wait for the demo's one receiver)"
        )
    copies = totals["correlation_duplicate_confirms"]
    console.print(
        f"   still in DQF {totals['in_dqf']:,}, in SAF {totals['in_saf']:,}; "
        f"duplicates {totals['duplicates']:,}; second copies by correlation id {copies:,}"
    )
    console.print(_gaps_line(totals["missing"], memory_puts))
    console.print(
        f"   confirmed {totals['confirmed']:,} (POSSDUPL {totals['possdupl']:,}, "
        f"{totals['possdupl_rate']:.1%}); dead letters {totals['dead_letters']:,}; "
        f"corrupt records {totals['corrupt_records']}"
    )
    console.print(f"   HTML report: {page}")
    if totals["confirmed"] != pcj_expected or totals["corrupt_records"]:
        console.print(
            f"[bold red]Audit disagrees[/]: Spark counted {totals['confirmed']} confirmed, "
            f"the PCJ holds {pcj_expected}"
        )
        return 1
    if copies != resent_copies:
        console.print(
            f"[bold red]Audit disagrees[/]: Spark counted {copies} second copies by "
            f"correlation id, the demo's table {resent_copies}"
        )
        return 1
    console.print("[bold green]Spark's audit agrees with the journal.[/]")
    return 0


def _spark_report(config_path: Path, out_dir: Path) -> Any:
    """Spark's report of groups 1 and 2 (mrs.audit.report.compute), Spark stopped
    after it, also when a Ctrl-C (or a SIGTERM handed on as one) cuts it short.

    Why its own signal handling: pyspark's SIGINT handler calls into the JVM from
    inside the handler, and py4j logs a call cut short with its traceback: mid-job,
    the one-line "interrupted" came after 30 lines of py4j's tracebacks."""
    from mrs.audit.load import queue_names
    from mrs.audit.report import compute
    from mrs.audit.session import build_session

    sources = {"config": str(config_path), "groups": "1,2"}
    on_sigint = signal.getsignal(signal.SIGINT)
    quiet = _Py4jQuiet()
    logging.getLogger().addFilter(quiet)
    try:
        spark = build_session("local[2]", app_name="mrs demo audit", log_path=out_dir / "spark.log")
        plain = signal.default_int_handler if callable(on_sigint) else signal.SIG_IGN
        signal.signal(signal.SIGINT, plain)
        try:
            report = compute(spark, sources, names=queue_names(str(config_path)))
        except BaseException:
            with contextlib.suppress(Exception):  # a call cut short: the JVM may be gone
                spark.stop()
            raise
        spark.stop()
        return report
    finally:
        logging.getLogger().removeFilter(quiet)
        if on_sigint is not None:
            signal.signal(signal.SIGINT, on_sigint)


class _Py4jQuiet(logging.Filter):
    """Drops what py4j logs on the root logger (`mrs` logs it to stderr): a Ctrl-C
    mid-call is logged there with its traceback ("KeyboardInterrupt while sending
    command"), though the demo then stops Spark and says so in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


def _gaps_line(missing: int, memory_puts: int) -> str:
    """The audit's `missing` (seq counters no journal holds between a sender's
    journaled messages), split into what the demo knows took them. The rest: the
    restart's skipped block, the puts in flight at the SIGKILL (a tick whose put never
    answered took a seq the tally did not count; the line named only refusals, which
    a run with every order stored has none of) and puts refused after their seq."""
    from_memory = min(missing, memory_puts)
    rest = missing - from_memory
    words = (
        f"   seq counters no journal holds (the audit's 'missing', a lead to follow): "
        f"{missing:,}; {from_memory:,} taken by the NN_MEM ticks (a memory put takes a "
        f"seq and is never journaled)"
    )
    if rest:
        words += (
            f", the other {rest:,} skipped by NYC's restart (the rest of its reserved "
            f"block) or taken by puts the SIGKILL cut short or that were refused"
        )
    return words
