"""Probes of the Spark audit as an auditor and a data engineer run it beside a group
that keeps archiving its PCJ (docs/audit.md): an export or a cluster-master report
while `mrs pcj archive` moves records, and a stop while the report's files are written.

Real LMDB journals, the real `mrs pcj archive` and `mrs audit` in child processes; the
one local Spark session of the test session (tests/audit_fixtures.py) for the report
and export run in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds

import mrs.audit.load
import mrs.audit.session
from journals import Journal, seq_key
from mrs.audit.report import compute, export
from tests.audit_fixtures import SPARK_SESSION, spark  # noqa: F401 - fixture
from tests.cli_helpers import run_mrs
from tests.journal_helpers import record, write_raw, write_records

RECORDS = 6


def _confirmed_group(tmp_path: Path) -> tuple[Path, list[int]]:
    """Group 1's data directory with RECORDS confirmed messages in its live PCJ."""
    data_dir = tmp_path / "g1"
    records = [record(i) for i in range(RECORDS)]
    write_records(data_dir / "journals", Journal.PCJ, records)
    return data_dir, [r.seq for r in records]


def _archive(data_dir: Path) -> None:
    """`mrs pcj archive` of everything confirmed: the server's automatic archive."""
    moved = run_mrs("pcj", "archive", "--data-dir", str(data_dir), "--group", "1",
                    "--until", "now", "--json")  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["archived"] == RECORDS


def _archive_after(monkeypatch, name: str, data_dir: Path) -> None:
    """`mrs.audit.load.NAME` looks at the PCJ archive, then the archive runs: the
    archive moves the live records just after the audit listed it."""
    looked = getattr(mrs.audit.load, name)

    def look_then_archive(*args, **kwargs):
        found = looked(*args, **kwargs)
        _archive(data_dir)
        return found

    monkeypatch.setattr(mrs.audit.load, name, look_then_archive)


@SPARK_SESSION
def test_an_export_while_the_pcj_is_archived_keeps_every_message(
    spark, tmp_path: Path, monkeypatch  # noqa: F811
) -> None:
    """Before: the export listed the PCJ archive's files, then Spark planned its scan
    of the live PCJ; an archive run in between (the server's automatic one) moved
    records out of the live PCJ into a file the export had not listed: they were in
    neither, and the export was short of them, unsaid. Now the live PCJ is read first
    (as `mrs audit` reads it), so a record moved meanwhile is in the live rows."""
    data_dir, seqs = _confirmed_group(tmp_path)
    _archive_after(monkeypatch, "archive_files", data_dir)
    sources = {"paths": json.dumps([str(data_dir)])}
    out = tmp_path / "parquet"
    assert export(spark, sources, str(out)) == {"pcj": RECORDS, "dlj": 0}
    table = ds.dataset(out / "pcj", partitioning="hive").to_table()
    assert sorted(table.column("seq").to_pylist()) == seqs


@SPARK_SESSION
def test_a_cluster_report_while_the_pcj_is_archived_counts_every_message(
    spark, tmp_path: Path, monkeypatch  # noqa: F811
) -> None:
    """Before: with a cluster master (the executors read the journals through the
    formats), the driver read the PCJ archive before Spark planned the scan of the
    live PCJ: an archive run in between made its records missing from both, and the
    report counted fewer confirmed messages than there were, and a gap. Now the live
    PCJ is read first, as on a local master."""
    data_dir, _seqs = _confirmed_group(tmp_path)
    monkeypatch.setattr(mrs.audit.session, "is_local", lambda master: False)
    _archive_after(monkeypatch, "read_archives", data_dir)
    report = compute(spark, {"paths": json.dumps([str(data_dir)])}).as_json()
    totals = report["totals"]
    assert (totals["confirmed"], totals["missing"], totals["duplicates"]) == (RECORDS, 0, 0)


STOP_WHILE_WRITING = """
import os, signal, sys
import mrs.audit.output as output
from mrs.tools.entry import main

written = output.write_json

def stopped_while_writing(report, path):
    os.kill(os.getpid(), signal.SIGTERM)  # the tables are written, the rest not yet
    written(report, path)

output.write_json = stopped_while_writing
sys.argv = ["mrs", "audit", "--data-dir", sys.argv[1], "--out", sys.argv[2], "--quiet"]
sys.exit(main())
"""
STOP_WHILE_MOVING_IN = STOP_WHILE_WRITING.replace(
    "output.write_json = stopped_while_writing",
    "moved = os.replace\n"
    "def stopped_while_moving(*args):\n"
    "    os.kill(os.getpid(), signal.SIGTERM) if args[0].name == 'totals.csv' else None\n"
    "    moved(*args)\n"
    "os.replace = stopped_while_moving",
)


def _previous_report(out: Path) -> dict[str, str]:
    """A previous run's report in `out`: {file: its text}."""
    (out / "tables").mkdir(parents=True)
    previous = {"report.json": '{"totals": {"confirmed": 1}}\n', "report.html": "<p>old</p>",
                "tables/totals.csv": '"confirmed"\n1\n'}  # fmt: skip
    for name, text in previous.items():
        (out / name).write_text(text)
    return previous


def _stopped_audit(script: str, data_dir: Path, out: Path) -> None:
    """The audit run by `script` ended by its SIGTERM, in its one line."""
    stopped = subprocess.run([sys.executable, "-c", script, str(data_dir), str(out)],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == "mrs audit: stopped (SIGTERM)"
    assert not [p for p in os.listdir(out) if p.startswith(".")]


def test_a_stop_while_the_report_is_written_leaves_the_previous_report_whole(
    tmp_path: Path,
) -> None:
    """Before: SIGTERM (or Ctrl-C) while `mrs audit --out DIR` wrote its files ended
    it mid-way: the new run's tables stood beside the previous run's report.json and
    report.html (or beside none), a report half one run's and half another's. Now the
    files are written aside and moved in at the end: a stop leaves DIR as it was."""
    data_dir, _seqs = _confirmed_group(tmp_path)
    out = tmp_path / "report"
    previous = _previous_report(out)
    _stopped_audit(STOP_WHILE_WRITING, data_dir, out)
    left = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert left == {*previous, "spark.log"}, left
    assert {name: (out / name).read_text() for name in previous} == previous


def test_a_stop_while_the_report_is_moved_in_ends_after_the_whole_report(
    tmp_path: Path,
) -> None:
    """A stop while the finished files are moved into DIR waits for the last one: the
    new report is whole (none of the previous run's files left), then the audit ends
    with its stop line and status."""
    data_dir, _seqs = _confirmed_group(tmp_path)
    out = tmp_path / "report"
    _previous_report(out)
    _stopped_audit(STOP_WHILE_MOVING_IN, data_dir, out)
    assert json.loads((out / "report.json").read_text())["totals"]["confirmed"] == RECORDS
    assert (out / "report.html").read_text().endswith("</html>\n")
    assert (out / "tables" / "totals.csv").read_text() != '"confirmed"\n1\n'
    tables = out / "tables"
    assert len(list(tables.glob("*.parquet"))) == len(list(tables.glob("*.csv"))) > 1


def test_a_trail_with_export_or_out_is_refused_not_ignored(tmp_path: Path) -> None:
    """Before: `mrs audit export --out DIR --trail ID` printed the trail and exported
    nothing, exit 0; `--trail ID --out DIR` wrote nothing to DIR, unsaid. Now each is
    one line and exit status 2, before anything is read."""
    data_dir, _seqs = _confirmed_group(tmp_path)
    out = tmp_path / "out"
    where = ("--data-dir", str(data_dir), "--trail", "corr-1", "--out", str(out), "--quiet")
    exported = run_mrs("audit", "export", *where)
    assert (exported.returncode, exported.stdout) == (2, ""), exported.stderr
    assert exported.stderr.splitlines() == [
        "mrs audit: export writes the journals, --trail prints one id's records: give one of them"]
    written = run_mrs("audit", *where)
    assert (written.returncode, written.stdout) == (2, ""), written.stderr
    assert written.stderr.splitlines() == [
        "mrs audit: --trail prints on stdout and writes no file (--out is the report's): "
        "redirect it, e.g. --json > trail.json"]  # fmt: skip
    assert not out.exists()


def test_a_trail_of_a_damaged_record_says_the_journal_is_damaged(tmp_path: Path) -> None:
    """Before: the trail of an id whose record is damaged said only "no record of
    correlation id ... in these journals", as if it had never been stored. Now the
    line says how many records are damaged, their ids unreadable."""
    data_dir, _seqs = _confirmed_group(tmp_path)
    write_raw(data_dir / "journals", Journal.DLJ, seq_key(record(RECORDS).seq), b"\x00" * 40)
    trail = run_mrs("audit", "--data-dir", str(data_dir), "--trail", "DEAD-1", "--quiet")
    assert (trail.returncode, trail.stdout) == (1, ""), trail.stderr
    assert trail.stderr.splitlines() == [
        "mrs audit: no record of correlation id 'DEAD-1' in these journals; 1 record is "
        "damaged, its id unreadable (`mrs journal verify` names it)"]  # fmt: skip


def test_a_note_beside_the_pcj_archive_is_not_read_as_a_damaged_file(tmp_path: Path) -> None:
    """Before: a file that is no Parquet file beside the archive's (a README an
    operator left in `pcj-archive/`) failed `mrs audit` and its trail with "not
    readable as Parquet ... move the damaged file aside", while `mrs audit export`
    (reading `*.parquet` only) went on. Now both read the archive's `*.parquet` files."""
    data_dir, seqs = _confirmed_group(tmp_path)
    _archive(data_dir)
    (data_dir / "pcj-archive" / "README.txt").write_text("archived PCJ, kept 7 years\n")
    trail = run_mrs("audit", "--data-dir", str(data_dir), "--trail", "corr-1", "--json",
                    "--quiet")  # fmt: skip
    assert trail.returncode == 0, trail.stderr
    events = json.loads(trail.stdout)["events"]
    assert sorted((e["event"], e["seq"]) for e in events) == [
        ("confirm", seqs[1]), ("delivered", seqs[1]), ("put", seqs[1])]  # fmt: skip
