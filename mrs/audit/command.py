"""`mrs audit` and `mrs audit export`: the Spark audit job from the shell.

    mrs audit --config bus.toml [--group 1,2] [--since 2026-11-01] [--until ...] \
              [--out DIR] [--master local[2] | spark://HOST:PORT] [--json]
    mrs audit --data-dir /var/mrs/g1 --data-dir /var/mrs/g2 [--config bus.toml]
    mrs audit --config bus.toml --trail ORDER-0042
    mrs audit export --config bus.toml --out /data/mrs-parquet [--overwrite]

Nothing here imports Spark until the job runs, so `mrs --help` stays fast. An
operator's mistake (no journal there, unknown group, bad time, no Java, a bad
--master) is one line on stderr and exit status 2; a damaged journal or a failed
Spark job is one line and status 1; Ctrl-C is one line and status 130. Files are
written only under `--out`: without it the report is the terminal summary (or
`--json`), and Spark's own log goes to a temporary file that is removed at the end
unless the error line names it. Progress is a line per stage on stderr.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mrs.errors import OperatorError
from mrs.offline.journal_files import operator_path

if TYPE_CHECKING:
    from mrs.audit.report import Report
    from mrs.config.schema import GroupConfig

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


class AuditUsageError(OperatorError):
    """The command line does not describe a readable audit (one line; status
    BADPARAM, under the one root `mrs.errors.MrsError`)."""


class AuditJournalDamaged(OperatorError):
    """A journal to read is damaged: one line naming the file and `mrs journal
    verify`/`salvage`, exit status 1, as `mrs pcj archive` says it."""


def add_parser(commands) -> argparse.ArgumentParser:
    audit = commands.add_parser(
        "audit",
        help="Spark audit of the PCJ/DLJ: report with charts, Parquet/CSV; `export` to Parquet",
        description="Read the PCJ and DLJ of one or more groups with Spark (formats mrs-pcj, "
        "mrs-dlj) and write the audit report (HTML, Parquet, CSV, JSON), or with `export` "
        "the journals as Parquet partitioned by date and group.",
    )
    audit.add_argument("action", nargs="?", choices=("report", "export"), default="report")
    audit.add_argument("--config", type=operator_path, help="bus configuration (TOML)")
    audit.add_argument("--group", action="append", default=[],
                       help="group id(s) of --config, e.g. 1 or 1,2 (default: all)")  # fmt: skip
    audit.add_argument("--data-dir", action="append", default=[], type=operator_path,
                       help="a group's data directory (repeat for several)")  # fmt: skip
    audit.add_argument(
        "--master",
        default="local[2]",
        help="Spark master URL (default local[2]; e.g. spark://host:7077)",
    )
    audit.add_argument("--since", metavar="TIME",
                       help="from TIME (confirm/dead-letter time): ISO (naive = local time; "
                            "Z or +02:00 honoured) or 2h, 30m, 1d back from now")  # fmt: skip
    audit.add_argument("--until", metavar="TIME",
                       help="at or before TIME (same forms; a time pasted from "
                            "mrs dump keeps its record); with --trail, both bound "
                            "its records")  # fmt: skip
    audit.add_argument("--out", type=operator_path,
                       help="write the HTML report, tables (Parquet, CSV), JSON and "
                            "Spark's log here (default: write nothing)")  # fmt: skip
    audit.add_argument("--trail", metavar="CORRELATION_ID",
                       help="every record of this correlation id (as `mrs dump` shows it: "
                            "text, or hex:... for other bytes): put, deliveries, "
                            "confirm or dead letter, replays (no Spark)")  # fmt: skip
    audit.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    audit.add_argument("--overwrite", action="store_true", help="export: replace --out")
    audit.add_argument("--quiet", action="store_true", help="no progress line, no table")
    audit.set_defaults(run=run)
    return audit


def parse_time(text: str | None, option: str) -> datetime.datetime | None:
    """The time rule of every operator tool (`mrs.offline.scalars.parse_time_ns`: a
    time without a zone is local time, a zone is honoured, `2h` is two hours ago), as
    the aware UTC datetime Spark compares with; a mistake is an AuditUsageError."""
    from mrs.offline.scalars import SelectionError, parse_time_utc

    if text is None:
        return None
    try:
        return parse_time_utc(text, time.time_ns(), option)
    except SelectionError as error:
        raise AuditUsageError(str(error)) from None


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The data source options for the command line's groups, checked here first so a
    mistake is one clear line before Spark starts."""
    groups = [g for text in args.group for g in re.split(r"[,\s]+", text) if g]
    if args.config is not None and not args.data_dir:
        from mrs.config.bus import load_config

        bus = load_config(args.config)
        try:
            ids = list(dict.fromkeys(int(g) for g in groups)) if groups else list(bus.groups)
            for group in ids:
                _check_not_replicated(bus.group(group))
                _readable_group_journal(group, bus.group(group).data_dir, bool(groups))
        except ValueError:
            raise AuditUsageError(f"--group: not a group id: {','.join(groups)}") from None
        except LookupError as error:
            raise AuditUsageError(str(error).strip("'\"")) from None
        return {"config": str(args.config.resolve()), "groups": ",".join(map(str, ids))}
    if not args.data_dir:
        raise AuditUsageError("give --config bus.toml (and --group) or --data-dir DIR")
    if groups and args.config is not None:
        raise AuditUsageError("--group picks groups of --config, --data-dir names its own "
                              "directories: give --group or --data-dir, not both")  # fmt: skip
    if groups:
        raise AuditUsageError("--group goes with --config")
    try:
        dirs = [str(readable_journal(d.resolve())) for d in args.data_dir]
    except FileNotFoundError as error:
        raise AuditUsageError(str(error)) from None
    if args.config is None:
        return {"paths": json.dumps(dirs)}
    from mrs.audit.load import PATHS_CONFIG
    from mrs.config.bus import load_config

    load_config(args.config)  # a mistake in it is one line here, not in Spark
    # the queues' names, and each group's `pcj_archive_dir` (`mrs.audit.load.archive_dirs`)
    return {"paths": json.dumps(dirs), PATHS_CONFIG: str(args.config.resolve())}


def readable_journal(data_dir: Path) -> Path:
    """The group's LMDB directory (`mrs.audit.scan.journal_dir`), checked first in a
    child process as `mrs pcj archive` checks it: LMDB trusts its file, and one cut
    short kills its reader (this process or a Spark worker) with SIGBUS, unsaid."""
    from mrs.audit.scan import journal_dir, unfinished_copy_problem
    from mrs.storage.journal_check import verify_before_open

    directory = journal_dir(data_dir)
    damage = verify_before_open(directory, unreadable_only=True)
    if damage is not None:
        raise AuditJournalDamaged(damage)
    if (unfinished := unfinished_copy_problem(directory)) is not None:
        raise AuditUsageError(unfinished)
    return directory


def _readable_group_journal(group: int, data_dir: Path, picked: bool) -> None:
    """`readable_journal` of a config's group, a missing journal said with the group's
    id (and, when every group of the config was meant, how to audit the others). Why:
    a bus file names groups on other hosts, and `mrs audit --config bus.toml` said only
    "no group journal (data.mdb) in /var/mrs/g3", naming neither the group nor --group."""
    try:
        readable_journal(data_dir)
    except FileNotFoundError as error:
        hint = "" if picked else " (give --group with the groups whose journals are here)"
        raise AuditUsageError(f"group {group}: {error}{hint}") from None


def _check_not_replicated(group: GroupConfig) -> None:
    """A replicated group's instances each hold their own copy of its journals (a
    replica may be behind): the audit reads the one the operator names."""
    if group.instances:
        names = ", ".join(i.data_dir.name for i in group.instances)
        raise AuditUsageError(
            f"group {group.id} ({group.name}) is replicated: give one instance's data "
            f"directory with --data-dir ({names}; the active's hold every answered commit, "
            "`mrs status` names it)"
        )


MASTER_CONNECT_TIMEOUT_S = 5.0
"""How long `check_master` waits for a standalone master's port to accept."""


def check_master(master: str) -> None:
    """A standalone master (`spark://HOST:PORT[,HOST:PORT...]`) none of whose
    addresses accepts a connection is the operator's to fix: said in one line at once.
    Why: Spark retries a master that does not answer for 72 s before it fails, and
    its error then names no address."""
    if not master.startswith("spark://"):
        return
    problems: list[str] = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port_text = address.rpartition(":")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise AuditUsageError(f"--master {master}: {address!r} is not HOST:PORT")
        try:
            with socket.create_connection(
                (host.strip("[]"), int(port_text)), MASTER_CONNECT_TIMEOUT_S
            ):
                return
        except OSError as error:
            problems.append(f"{address}: {error.strerror or error}")
    raise AuditUsageError(f"no Spark master answers at {master} ({'; '.join(problems)})")


def check_java() -> None:
    import os

    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise AuditUsageError("Spark needs Java 17 or later: install a JRE (e.g. openjdk-17-jre)")


class Progress:
    """A line per stage on stderr (a pipe or a terminal alike), with the seconds
    since the audit started; silent with --quiet. It writes to its own copy of
    stderr, so its lines stay on the terminal while the JVM starts with fd 2
    pointed at Spark's log (`mrs.audit.session`)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.monotonic()
        self.stream = os.fdopen(os.dup(2), "w", buffering=1) if enabled else None

    def __call__(self, text: str) -> None:
        if self.stream is not None:
            elapsed = time.monotonic() - self.started
            print(f"mrs audit: {elapsed:5.1f}s {text}", file=self.stream, flush=True)


_TERMINAL: list[int] = []
"""A copy of fd 2 taken before Spark starts (it points fd 2 at its log meanwhile)."""
_TEMPORARY_LOG: list[Path] = []
"""Spark's log in a temporary file (no --out): removed unless a line names it."""
_STAGING: list[Path] = []
"""The report or export being written beside --out's files (`_staging_in`): removed
by a stop."""
_HELD: list[int] = []
"""While `_move_in` moves the report's or export's files into --out: a stop's signal
waits here (its number) and ends the audit once the last file is in."""
_HOLDING: list[bool] = []
"""Non-empty while `_move_in` moves the files (a stop's signal is held)."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What stops an audit with its one line: Ctrl-C, `kill` (a service stopped, `timeout`)
and a closed terminal. Why SIGTERM and SIGHUP too: their default ended the audit at
once, and each run so stopped left its temporary Spark log in `$TMPDIR`."""


def _interrupted(signum: int | None = None, _frame=None) -> None:
    """A stop (Ctrl-C, SIGTERM, SIGHUP): one line and status 130 (143, 129), whatever
    Spark was doing. The JVM ignores SIGINT and exits when its stdin (our pipe) closes;
    nothing is left half-written because files are written last, and `os._exit` skips
    py4j's shutdown tracebacks."""
    if _HOLDING:  # the report's files are being moved in: stop after the last
        _HELD.append(signal.SIGINT if signum is None else signum)
        return
    if signum is None or signum == signal.SIGINT:
        line, code = "interrupted", EXIT_INTERRUPTED
    else:
        line, code = f"stopped ({signal.Signals(signum).name})", 128 + int(signum)
    try:
        os.write(_TERMINAL[0] if _TERMINAL else 2, f"\nmrs audit: {line}\n".encode())
        for path in _TEMPORARY_LOG:  # `os._exit` skips every `finally`
            path.unlink(missing_ok=True)
        for staging in _STAGING:
            shutil.rmtree(staging, ignore_errors=True)
        _remove_shipped_code()
    finally:
        os._exit(code)


def _remove_shipped_code() -> None:
    from mrs.audit.session import remove_shipped_code

    remove_shipped_code()


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
    if not _TERMINAL:
        _TERMINAL.append(os.dup(2))
    previous = {signum: signal.signal(signum, _interrupted) for signum in STOP_SIGNALS}
    try:
        return _run(args)
    except KeyboardInterrupt:
        _interrupted()
        return EXIT_INTERRUPTED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(args: argparse.Namespace) -> int:
    progress = Progress(enabled=not args.quiet)
    try:
        sources = source_options(args)
        since = parse_time(args.since, "--since")
        until = parse_time(args.until, "--until")
        if since is not None and until is not None and since > until:  # both inclusive
            raise AuditUsageError(f"--since {args.since} is not before --until {args.until}")
        _check_trail_options(args)
        if args.action == "export":
            _check_export_out(args.out, args.overwrite)
        if args.trail is not None:
            return _trail(sources, trail_id(args.trail), args, progress, (since, until))
        check_java()
        check_master(args.master)
        log_path = _log_path(args.out)
    except AuditUsageError as error:
        print(f"mrs audit: {error}", file=sys.stderr)
        return EXIT_USAGE
    except AuditJournalDamaged as error:
        print(f"mrs audit: {error}", file=sys.stderr)
        return EXIT_FAILED
    if args.out is None:
        _TEMPORARY_LOG[:] = [log_path]
    progress(f"starting Spark ({args.master}); its log: {log_path}")
    try:
        return _run_spark(args, sources, since, until, progress, log_path)
    finally:
        _TEMPORARY_LOG.clear()


def _run_spark(args: argparse.Namespace, sources: dict[str, str], since, until,
               progress: Progress, log_path: Path) -> int:  # fmt: skip
    """Start Spark and run the job. Spark's temporary log (no --out) is kept only when
    the one line names it: it was kept after every failure, so each mistyped
    --master and each Ctrl-C left a `mrs-audit-*.log` in /tmp that nothing named."""
    from mrs.audit.session import build_local_archive, is_local

    temporary = args.out is None
    try:
        spark, table = _start_spark(sources, args, log_path, progress)
    except AuditJournalDamaged as error:  # a PCJ archive's file (mrs.audit.load)
        _drop_log(log_path, temporary)
        print(f"mrs audit: {error}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as error:
        if not _from_spark(error):
            _drop_log(log_path, temporary)
            raise
        print(f"mrs audit: Spark did not start with --master {args.master}: "
              f"{_start_failure(error, log_path, temporary)}", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    progress("Spark started")
    signal.signal(signal.SIGINT, _interrupted)  # pyspark installed its own
    keep_log = False
    try:
        if args.action == "export":
            return _export(spark, sources, args, since, until)
        return _report(spark, sources, args, since, until, progress, table)
    except AuditJournalDamaged as error:  # a PCJ archive's file, read after the start
        print(f"mrs audit: {error}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as error:  # noqa: BLE001 - Spark wraps everything; say it in one line
        if _from_spark(error):
            keep_log = True
            print(f"mrs audit: Spark job failed: {spark_error_line(error)} (log: {log_path})",
                  file=sys.stderr)  # fmt: skip
            return EXIT_FAILED
        raise
    finally:
        spark.stop()
        _remove_shipped_code()
        if is_local(args.master):
            build_local_archive()  # once per JDK and Spark: later JVMs start sooner
        if not keep_log:
            _drop_log(log_path, temporary)


def _drop_log(log_path: Path, temporary: bool) -> None:
    if temporary:
        log_path.unlink(missing_ok=True)


def _start_failure(error: BaseException, log_path: Path, temporary: bool) -> str:
    """Why Spark did not start, and where its log is. A temporary log whose reason is
    in the line has nothing more for the operator: it is removed, and the line says
    how to keep one."""
    reason = _reason_in_log(log_path)
    if reason is None:
        return f"{spark_error_line(error)} (log: {log_path})"
    if temporary:
        log_path.unlink(missing_ok=True)
        return f"{reason} (to keep Spark's log: give --out DIR)"
    return f"{reason} (log: {log_path})"


def _start_spark(sources: dict[str, str], args: argparse.Namespace, log_path: Path,
                 progress: Progress):  # fmt: skip
    """(SparkSession, the journals as one table or None): with a local master the
    JVM starts while this thread reads the journals (both take seconds)."""
    from mrs.audit.load import read_journals
    from mrs.audit.session import build_session, is_local

    local = is_local(args.master) and args.action == "report"
    with concurrent.futures.ThreadPoolExecutor(1, "audit-spark-start") as pool:
        starting = pool.submit(build_session, args.master, log_path=log_path)
        try:
            table = read_journals(sources, progress=progress) if local else None
        finally:
            spark = starting.result()
    return spark, table


def _from_spark(error: BaseException) -> bool:
    return type(error).__module__.startswith(("pyspark", "py4j"))


def spark_start_line(error: BaseException, log_path: Path) -> str:
    """Why Spark did not start: the JVM's reason from its log (a bad master URL, no
    master answering), which py4j's error does not carry; else `spark_error_line`."""
    reason = _reason_in_log(log_path)
    return spark_error_line(error) if reason is None else reason


def _reason_in_log(log_path: Path) -> str | None:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        text = ""
    for pattern in (r"Reason: (.*)", r"SparkException: (.*)"):
        found = re.findall(pattern, text)
        if found:
            return found[-1].strip()[:300]
    # A cluster manager's client (k8s) fails below SparkContext: py4j says only "An
    # error occurred while calling None.org.apache.spark.api.java.JavaSparkContext".
    cause = re.search(r"Error initializing SparkContext\.(?s:.*?)\nCaused by: [\w.$]+: (.*)", text)
    if cause:
        return cause.group(1).strip()[:300]
    return None


def _log_path(out: Path | None) -> Path:
    """Spark's log: in --out, else a temporary file (removed at the end unless a line names it).
    An --out that cannot be a directory is the operator's to fix: one line, before
    Spark starts."""
    if out is not None:
        out = out.resolve()
        if out.exists() and not out.is_dir():
            raise AuditUsageError(f"--out {out}: a file, not a directory")
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / "spark.log").touch()
        except OSError as error:
            raise AuditUsageError(f"--out {out}: {error.strerror or error}") from None
        return out / "spark.log"
    handle, name = tempfile.mkstemp(prefix="mrs-audit-", suffix=".log")
    os.close(handle)
    return Path(name)


def trail_id(text: str) -> bytes:
    """The correlation id `--trail` names, written as `mrs dump` shows one: its text,
    `hex:...` for an id that is not printable UTF-8 (`mrs dump`'s `hex:fffe2d30`), or
    `text:...` for an id that itself starts with `hex:`. Bytes typed on the command
    line that are not UTF-8 are the id's bytes (they were a traceback)."""
    from mrs.offline.scalars import HEX_PREFIX, TEXT_PREFIX

    if text.startswith(HEX_PREFIX):
        try:
            return bytes.fromhex(text[len(HEX_PREFIX) :].replace(" ", ""))
        except ValueError:
            raise AuditUsageError(
                f"--trail: {text!r} is not hex (use pairs of hex digits after 'hex:')"
            ) from None
    return os.fsencode(text.removeprefix(TEXT_PREFIX))


def _shown_id(correlation_id: bytes) -> str:
    """The id as `mrs dump` shows it: its text, or hex:... if it is not UTF-8."""
    try:
        text = correlation_id.decode()
    except UnicodeDecodeError:
        return "hex:" + correlation_id.hex()
    return "text:" + text if text.startswith("hex:") else text


def _trail(sources: dict[str, str], correlation_id: bytes, args: argparse.Namespace,
           progress: Progress, window: tuple) -> int:  # fmt: skip
    """The trail of one correlation id, read on this machine without Spark: the
    records in the window (`--since`/`--until`, as the report counts them) only."""
    from mrs.audit.load import queue_names, read_journals
    from mrs.audit.reconcile import in_window, trail_events, trail_records
    from mrs.audit.report import _plain

    table = read_journals(sources, progress=progress, exact_times=True)  # as mrs dump prints
    records = trail_records(table, correlation_id)
    kept = [record for record in records if in_window(record, *window)]
    events = trail_events(kept)
    names = queue_names(str(args.config) if args.config else None)
    for event in events:
        for address, name in names.items():
            event["detail"] = re.sub(rf"\b{re.escape(address)}\b", name, event["detail"])
    if args.json:
        print(json.dumps({"correlation_id": _shown_id(correlation_id),
                          "events": _plain(events)}))  # fmt: skip
    else:
        for event in events:
            moment = _plain(event["time"]) or "(no time)"
            print(f"{moment}  {event['journal']}:{event['group']}:{event['seq']}  "
                  f"{event['event']}: {event['detail']}")  # fmt: skip
    if not events:
        damaged = table.num_rows - table["corrupt"].null_count
        line = _no_trail(correlation_id, args, len(records), damaged)
        print(f"mrs audit: {line}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _no_trail(correlation_id: bytes, args: argparse.Namespace, outside: int,
              damaged: int) -> str:  # fmt: skip
    """Why a trail is empty: no record of the id at all, or none in the window; and
    the damaged records whose ids are unreadable. Why those: a trail asked for an id
    whose record was damaged said "no record of it", as if it had never been stored,
    the journal's damage (counted by the report, `corrupt_records`) unsaid."""
    shown = _shown_id(correlation_id)
    if not outside:
        line = f"no record of correlation id {shown!r} in these journals"
    else:
        plural = "record" if outside == 1 else "records"
        window = f"between {args.since or 'the start'} and {args.until or 'now'}"
        line = (f"no record of correlation id {shown!r} {window} ({outside} {plural} of it "
                "outside that window)")  # fmt: skip
    if damaged == 1:
        line += "; 1 record is damaged, its id unreadable (`mrs journal verify` names it)"
    elif damaged:
        line += (f"; {damaged} records are damaged, their ids unreadable (`mrs journal "
                 "verify` names them)")  # fmt: skip
    return line


def _check_trail_options(args: argparse.Namespace) -> None:
    """`--trail` prints one id's records and writes nothing: with `export` or `--out`
    it is refused. Why: `mrs audit export --out DIR --trail ID` printed the trail and
    exported nothing, exit 0, and `--trail ID --out DIR` left DIR unmade, unsaid."""
    if args.trail is None:
        return
    if args.action == "export":
        raise AuditUsageError("export writes the journals, --trail prints one id's records: "
                              "give one of them")  # fmt: skip
    if args.out is not None:
        raise AuditUsageError("--trail prints on stdout and writes no file (--out is the "
                              "report's): redirect it, e.g. --json > trail.json")  # fmt: skip


def _check_export_out(out: Path | None, overwrite: bool) -> None:
    """Export's --out: given, and empty unless --overwrite. Checked before Spark starts
    (it was checked after: ten seconds of Spark, and its log added to the directory
    the operator had just been told was left alone)."""
    if out is None:
        raise AuditUsageError("export needs --out DIR")
    out = out.resolve()
    if overwrite or not out.is_dir():
        return
    if any(p.name != "spark.log" for p in out.iterdir()):
        raise AuditUsageError(f"export: {out} is not empty (give --overwrite to replace it)")


def _export(spark, sources, args, since, until) -> int:
    """Both journals' Parquet in --out, whole or not at all, as `write_report` leaves
    a report. Why: Spark wrote straight into --out, the PCJ then the DLJ, so a stop in
    between left a new `pcj/` beside no `dlj/` (or, with --overwrite, beside the
    previous export's: an export half one run's and half another's, which a data
    engineer's reader takes as one)."""
    from mrs.audit.report import export

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    staging = _staging_in(out)
    try:
        written = export(spark, sources, str(staging), since, until, mode="overwrite")
        _move_in(staging, out, [staging / "pcj", staging / "dlj"])
    finally:
        _staging_done(staging)
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


def _report(spark, sources, args, since, until, progress, table) -> int:
    from rich.console import Console

    from mrs.audit.load import queue_names
    from mrs.audit.output import print_summary
    from mrs.audit.report import compute

    names = queue_names(str(args.config) if args.config else None)
    report = compute(spark, sources, since, until, table=table, names=names, progress=progress)
    page = None
    if args.out is not None:
        progress(f"writing the report to {args.out}")
        page = write_report(report, args.out.resolve(),
                            describe(sources, since, until, args.master))  # fmt: skip
    progress("done")
    if args.json:
        print(json.dumps({**report.as_json(), "html": str(page) if page else None}))
        return 0
    if not args.quiet:
        print_summary(report, Console())
    if page is not None:
        print(f"report: {page}")
    return 0


def write_report(report: Report, out: Path, description: str) -> Path:
    """The report's files in `out` (report.html, its path returned), whole or not at
    all: written into a directory beside them, then moved in with a stop's signal
    held until the last one is in (a stop meanwhile ends the audit just after).

    Why: a stop (Ctrl-C, SIGTERM, `timeout`) while the files were written ended the
    audit mid-way: the new run's tables stood beside the previous run's report.json
    and report.html (or beside none), a report half one run's and half another's."""
    from mrs.audit.output import write_html, write_json, write_tables

    staging = _staging_in(out)
    try:
        tables = write_tables(report, staging)
        write_json(report, staging / "report.json")
        write_html(report, staging / "report.html", "MRS audit", description)
        (out / "tables").mkdir(exist_ok=True)
        # report.html last: there, the report is whole
        _move_in(staging, out, [*tables, staging / "report.json", staging / "report.html"])
    finally:
        _staging_done(staging)
    return out / "report.html"


def _staging_in(out: Path) -> Path:
    """A directory in `out` (so the moves in are renames on one filesystem) that a stop
    removes; hidden, so Spark and pyarrow readers of `out/pcj` never see it."""
    staging = Path(tempfile.mkdtemp(prefix=".mrs-audit-", dir=out))
    _STAGING.append(staging)
    return staging


def _staging_done(staging: Path) -> None:
    """The staging directory removed (with what `_move_in` put aside), then a stop that
    came while the files moved in ends the audit."""
    shutil.rmtree(staging, ignore_errors=True)
    _STAGING.clear()
    if _HELD:
        _interrupted(_HELD[0])


def _move_in(staging: Path, out: Path, paths: list[Path]) -> None:
    """Each path under `staging` renamed to its place under `out`, in order, with a
    stop's signal held until the last one is in. A directory already there (a previous
    export's `pcj/`) is first moved aside into `staging`, which `_staging_done` removes:
    a rename does not replace a directory that has files."""
    _HOLDING.append(True)
    try:
        for path in paths:
            target = out / path.relative_to(staging)
            if path.is_dir() and target.is_dir():
                os.replace(target, Path(tempfile.mkdtemp(dir=staging)) / target.name)
            os.replace(path, target)
    finally:
        _HOLDING.clear()
