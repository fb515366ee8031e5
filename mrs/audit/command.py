"""`mrs audit` and `mrs audit export`: the Spark audit job from the shell.

    mrs audit --config bus.toml [--group 1,2] [--since 2026-11-01] [--until ...] \
              [--out DIR] [--master local[*] | spark://HOST:PORT] [--json]
    mrs audit --data-dir /var/mrs/g1 --data-dir /var/mrs/g2
    mrs audit export --config bus.toml --out /data/mrs-parquet [--overwrite]

Nothing here imports Spark until the job runs, so `mrs --help` stays fast. An
operator's mistake (no journal there, unknown group, bad time, no Java) is one line
on stderr and exit status 2; a failed Spark job is one line and status 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import sys
import threading
import time
from pathlib import Path

from mrs.errors import OperatorError

EXIT_USAGE = 2
EXIT_FAILED = 1


class AuditUsageError(OperatorError):
    """The command line does not describe a readable audit (one line; status
    BADPARAM, under the one root `mrs.errors.MrsError`)."""


def add_parser(commands) -> argparse.ArgumentParser:
    audit = commands.add_parser(
        "audit",
        help="Spark audit of the PCJ/DLJ: report with charts, Parquet/CSV; `export` to Parquet",
        description="Read the PCJ and DLJ of one or more groups with Spark (formats mrs-pcj, "
        "mrs-dlj) and write the audit report (HTML, Parquet, CSV, JSON), or with `export` "
        "the journals as Parquet partitioned by date and group.",
    )
    audit.add_argument("action", nargs="?", choices=("report", "export"), default="report")
    audit.add_argument("--config", type=Path, help="bus configuration (TOML)")
    audit.add_argument("--group", action="append", default=[],
                       help="group id(s) of --config, e.g. 1 or 1,2 (default: all)")  # fmt: skip
    audit.add_argument("--data-dir", action="append", default=[], type=Path,
                       help="a group's data directory (repeat for several)")  # fmt: skip
    audit.add_argument("--master", default="local[*]",
                       help="Spark master URL (default local[*]; e.g. spark://host:7077)")
    audit.add_argument("--since", help="from this UTC time (ISO 8601; confirm/dead-letter time)")
    audit.add_argument("--until", help="before this UTC time (ISO 8601)")
    audit.add_argument("--out", type=Path, default=Path("mrs-audit"),
                       help="output directory (default ./mrs-audit)")  # fmt: skip
    audit.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    audit.add_argument("--overwrite", action="store_true", help="export: replace --out")
    audit.add_argument("--quiet", action="store_true", help="no progress line, no table")
    audit.set_defaults(run=run)
    return audit


def parse_time(text: str | None, option: str) -> datetime.datetime | None:
    """ISO 8601 date or date-time; UTC unless it names a zone."""
    if text is None:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise AuditUsageError(
            f"{option}: not an ISO 8601 time (e.g. 2026-11-23 or 2026-11-23T14:00): {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The data source options for the command line's groups, checked here first so a
    mistake is one clear line before Spark starts."""
    from mrs.audit.scan import journal_dir

    groups = [g for text in args.group for g in re.split(r"[,\s]+", text) if g]
    if args.config is not None:
        if args.data_dir:
            raise AuditUsageError("give --config (with --group) or --data-dir, not both")
        from mrs.config.bus import load_config

        bus = load_config(args.config)
        try:
            ids = [int(g) for g in groups] if groups else list(bus.groups)
            for group in ids:
                journal_dir(bus.group(group).data_dir)
        except ValueError:
            raise AuditUsageError(f"--group: not a group id: {','.join(groups)}") from None
        except (LookupError, FileNotFoundError) as error:
            raise AuditUsageError(str(error).strip("'\"")) from None
        return {"config": str(args.config.resolve()), "groups": ",".join(map(str, ids))}
    if not args.data_dir:
        raise AuditUsageError("give --config bus.toml (and --group) or --data-dir DIR")
    if groups:
        raise AuditUsageError("--group goes with --config")
    try:
        dirs = [str(journal_dir(d.resolve())) for d in args.data_dir]
    except FileNotFoundError as error:
        raise AuditUsageError(str(error)) from None
    return {"paths": json.dumps(dirs)}


def check_java() -> None:
    import os

    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise AuditUsageError("Spark needs Java 17 or later: install a JRE (e.g. openjdk-17-jre)")


class Progress:
    """One line on stderr while Spark works: stage and tasks done of total."""

    def __init__(self, spark, enabled: bool) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.enabled = enabled and sys.stderr.isatty()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="audit-progress", daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> Progress:
        if self.enabled:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.enabled:
            self.thread.join()
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            done = total = 0
            for stage_id in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            elapsed = time.monotonic() - self.started
            line = f"spark: {done}/{total} tasks" if total else "spark: planning"
            print(f"\r\x1b[K{line}  {elapsed:.0f}s", end="", file=sys.stderr, flush=True)


def spark_error_line(error: BaseException) -> str:
    """The one line that says what went wrong inside a Spark job."""
    text = str(error)
    for pattern in (r"SourceError: (.*)", r"FileNotFoundError: (.*)", r"CorruptRecord: (.*)"):
        match = re.search(pattern, text)
        if match:
            return match.group(1).strip()
    first = next((line for line in text.splitlines() if line.strip()), type(error).__name__)
    return first.strip()[:300]


def run(args: argparse.Namespace) -> int:
    try:
        sources = source_options(args)
        since = parse_time(args.since, "--since")
        until = parse_time(args.until, "--until")
        check_java()
    except AuditUsageError as error:
        print(f"mrs audit: {error}", file=sys.stderr)
        return EXIT_USAGE
    from mrs.audit.session import build_session

    spark = build_session(args.master)
    try:
        with Progress(spark, enabled=not args.quiet and not args.json):
            if args.action == "export":
                return _export(spark, sources, args, since, until)
            return _report(spark, sources, args, since, until)
    except Exception as error:  # noqa: BLE001 - Spark wraps everything; say it in one line
        if type(error).__module__.startswith(("pyspark", "py4j")):
            print(f"mrs audit: Spark job failed: {spark_error_line(error)}", file=sys.stderr)
            return EXIT_FAILED
        raise
    finally:
        spark.stop()


def _export(spark, sources, args, since, until) -> int:
    from mrs.audit.report import export

    out = args.out.resolve()
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        print(f"mrs audit export: {out} is not empty (give --overwrite to replace it)",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    written = export(spark, sources, str(out), since, until, mode="overwrite")
    summary = {"out": str(out), "rows": written}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"exported {written['pcj']:,} PCJ and {written['dlj']:,} DLJ rows to {out} "
              "(Parquet, partitioned by date and group)")  # fmt: skip
    return 0


def describe(sources: dict[str, str], since, until, master: str) -> str:
    where = (
        f"{sources['config']} groups {sources['groups']}"
        if "config" in sources
        else ", ".join(json.loads(sources["paths"]))
    )
    window = f"; {since or 'start'} to {until or 'now'}" if since or until else ""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return f"{where}{window}; computed by Spark ({master}) at {stamp}"


def _report(spark, sources, args, since, until) -> int:
    from rich.console import Console

    from mrs.audit.output import print_summary, write_html, write_json, write_tables
    from mrs.audit.report import compute

    report = compute(spark, sources, since, until)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    write_tables(report, out)
    write_json(report, out / "report.json")
    page = write_html(report, out / "report.html", "MRS audit",
                      describe(sources, since, until, args.master))  # fmt: skip
    if args.json:
        print(json.dumps({**report.as_json(), "html": str(page)}))
        return 0
    if not args.quiet:
        print_summary(report, Console())
    print(f"report: {page}")
    return 0
