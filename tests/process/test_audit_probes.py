"""Probes of `mrs audit` and the PCJ archive at their edges: groups whose seqs do not
fit a signed 64-bit integer, a damaged journal, an `--out` that cannot be a
directory, a Spark master URL that is wrong. Each mistake an operator can fix is one
line and a nonzero exit; each record stored is read, reported and archived.

Real LMDB journals, the real `mrs` command in a child process; the one local Spark
session of the test session (tests/audit_fixtures.py) for the report's figures.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from pyspark.sql.datasource import GreaterThanOrEqual, In, LessThan, LessThanOrEqual

from journals import Journal, JournalStore, WriteBatch, seq_key
from mrs.audit import scan
from mrs.audit.columns import signed_seq, stored_seq
from mrs.audit.load import read_journals
from mrs.audit.report import compute
from mrs.audit.source import push
from tests.audit_fixtures import SPARK_SESSION, spark  # noqa: F401 - fixture
from tests.cli_helpers import run_mrs
from tests.journal_helpers import record, write_records

HIGH_GROUP = 20_000
"""A valid group id (1..32000) whose seqs (group << 49 | counter) are 2**63 and up."""
HIGH_SEQS = [(HIGH_GROUP << 49) + counter for counter in (1, 2, 4, 5)]
"""Counter 3 is missing: the audit must report that gap for this group's sender."""
LOW_SEQS = [(1 << 49) + counter for counter in (1, 2, 3)]


def _high_group_dir(directory: Path) -> Path:
    """A data dir whose PCJ holds group 1's and group 20000's confirmed messages,
    and one corrupt record with a seq of group 20000."""
    journals = directory / "journals"
    records = [record(i, seq=seq) for i, seq in enumerate(LOW_SEQS)] + [
        record(10 + i, seq=seq, source_group=HIGH_GROUP, target_group=HIGH_GROUP)
        for i, seq in enumerate(HIGH_SEQS)
    ]
    write_records(journals, Journal.PCJ, records)
    store = JournalStore(journals)
    try:
        key = seq_key((HIGH_GROUP << 49) + 99)
        store.commit_now(WriteBatch.empty().put_raw(Journal.PCJ, key, b"\x00garbage"))
    finally:
        store.close()
    return directory


def test_a_group_above_16383_reads_with_its_seqs_as_signed_64_bit(tmp_path):
    """Before: OverflowError (`mrs audit` said "unexpected error") for any journal
    holding a message of a group 16384..32000; the column is Spark's signed bigint."""
    data_dir = _high_group_dir(tmp_path / "g")
    table = read_journals({"paths": json.dumps([str(data_dir / "journals")])})
    good = [row for row in table.to_pylist() if row["corrupt"] is None]
    corrupt = [row for row in table.to_pylist() if row["corrupt"] is not None]
    assert [row["seq"] for row in good] == [signed_seq(s) for s in LOW_SEQS + HIGH_SEQS]
    assert [stored_seq(row["seq"]) for row in good] == LOW_SEQS + HIGH_SEQS
    assert [stored_seq(row["seq"]) for row in corrupt] == [(HIGH_GROUP << 49) + 99]


@pytest.mark.parametrize(
    "filters",
    [
        [LessThan(("seq",), 0)],
        [GreaterThanOrEqual(("seq",), 0)],
        [LessThanOrEqual(("seq",), LOW_SEQS[1])],
        [GreaterThanOrEqual(("seq",), signed_seq(HIGH_SEQS[1])), LessThan(("seq",), 0)],
        [
            GreaterThanOrEqual(("seq",), signed_seq(HIGH_SEQS[2])),
            LessThanOrEqual(("seq",), LOW_SEQS[0]),
        ],  # fmt: skip
        [In(("seq",), (signed_seq(HIGH_SEQS[0]), LOW_SEQS[2]))],
    ],
)
def test_pushed_seq_filters_on_signed_values_select_exactly(tmp_path, filters):
    """Spark pushes comparisons of the signed column: the key ranges must hold the
    same records a plain evaluation keeps (negative values are the keys above 2**63)."""
    data_dir = _high_group_dir(tmp_path / "g")
    conditions = scan.Conditions()
    for flt in filters:
        conditions = push(conditions, flt)
    sources = [(str(data_dir / "journals"), 1)]
    parts = scan.plan(sources, "pcj", conditions, records_per_partition=2, settle_s=0)
    seen = [signed_seq(v[scan.SEQ]) for p in parts for _, v in scan.scan_values(p)
            if not isinstance(v, str)]  # fmt: skip
    columns = sorted(signed_seq(s) for s in LOW_SEQS + HIGH_SEQS)
    expected = [s for s in columns if all(_keeps(s, flt) for flt in filters)]
    assert sorted(seen) == expected


def _keeps(value: int, flt) -> bool:
    if isinstance(flt, In):
        return value in flt.value
    compare = {LessThan: int.__lt__, LessThanOrEqual: int.__le__,
               GreaterThanOrEqual: int.__ge__}[type(flt)]  # fmt: skip
    return compare(value, flt.value)


@SPARK_SESSION
def test_the_report_of_a_group_above_16383_counts_its_gap(spark, tmp_path):  # noqa: F811
    data_dir = _high_group_dir(tmp_path / "g")
    report = compute(spark, {"paths": json.dumps([str(data_dir / "journals")])}).as_json()
    assert report["totals"]["confirmed"] == len(LOW_SEQS + HIGH_SEQS)
    assert report["totals"]["corrupt_records"] == 1
    assert report["totals"]["missing"] == 1
    senders = {row["source"]: row for row in report["reconciliation_sender"]}
    assert senders[f"{HIGH_GROUP}.13"]["missing"] == 1
    assert senders[f"{HIGH_GROUP}.13"]["confirmed"] == len(HIGH_SEQS)
    assert senders["1.13"]["missing"] == 0


def test_pcj_archive_of_a_group_above_16383_moves_every_record(tmp_path):
    """Before: `mrs pcj archive` failed with OverflowError on every run, so the PCJ of
    such a group grew until its map was full."""
    data_dir = _high_group_dir(tmp_path / "g")
    done = run_mrs("pcj", "archive", "--data-dir", str(data_dir), "--group", str(HIGH_GROUP),
                   "--until", "now", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["archived"], summary["corrupt_kept"]) == (len(LOW_SEQS + HIGH_SEQS), 1)
    archived = ds.dataset(summary["dir"], format="parquet", partitioning="hive").to_table()
    assert sorted(stored_seq(s) for s in archived.column("seq").to_pylist()) == sorted(
        LOW_SEQS + HIGH_SEQS
    )


def test_a_run_killed_after_its_files_finishes_for_a_group_above_16383(tmp_path):
    """The next run reads the killed run's files back to delete their records from
    the PCJ: their signed seqs were turned into keys as they were, every rerun failed
    ("int too large to convert") and the records sat in both places."""
    data_dir = _high_group_dir(tmp_path / "g")
    where = ("--data-dir", str(data_dir), "--group", str(HIGH_GROUP), "--until", "now")
    killed = run_mrs("pcj", "archive", *where, env={"MRS_PCJ_ARCHIVE_KILL_AT": "written"})
    assert killed.returncode == -9, killed.stderr
    done = run_mrs("pcj", "archive", *where, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["recovered"], summary["archived"], summary["pcj_remaining"]) == (7, 0, 1)
    archived = ds.dataset(summary["dir"], format="parquet", partitioning="hive").to_table()
    seqs = sorted(stored_seq(s) for s in archived.column("seq").to_pylist())
    assert seqs == sorted(LOW_SEQS + HIGH_SEQS)


def test_a_second_archive_run_beside_a_running_one_stops_in_one_line(tmp_path):
    """Two runs at once (an operator's beside the server's automatic one) each took
    the other's chunk intent for a killed run's: 48,000 of 60,000 records were
    archived twice. A run holds the data directory's archive lock; a second stops."""
    data_dir = _high_group_dir(tmp_path / "g")
    where = ("--data-dir", str(data_dir), "--group", str(HIGH_GROUP), "--until", "now")
    with open(data_dir / "pcj-archive.lock", "w") as held:  # what a run under way holds
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = run_mrs("pcj", "archive", *where)
        _one_line(second, 1, "another archive run works group 20000's PCJ", "run again")
    assert not list((data_dir / "archive").rglob("*.parquet"))
    done = run_mrs("pcj", "archive", *where, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["archived"] == 7, done.stderr


def _one_line(result, status: int, *words: str) -> None:
    """The command exited with `status` and said one line holding `words`."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == status, result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "\tat " not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_journal_cut_short_is_one_line_not_a_sigbus(tmp_path):
    """Before: `mrs audit` died of SIGBUS (exit 135, nothing said) reading a data.mdb
    cut short; a zero-byte one was "unexpected error"."""
    journals = tmp_path / "g" / "journals"
    write_records(journals, Journal.PCJ, [record(1, body=b"x" * (4 << 20))])
    data = journals / "data.mdb"
    os.truncate(data, data.stat().st_size // 2)
    cut = run_mrs("audit", "--data-dir", str(tmp_path / "g"), "--quiet")
    _one_line(cut, 1, "is damaged", "mrs journal verify")
    data.write_bytes(b"")
    empty = run_mrs("audit", "--data-dir", str(tmp_path / "g"), "--trail", "corr-1")
    _one_line(empty, 1, "is damaged", str(data))


def test_an_out_that_cannot_be_a_directory_is_one_line(tmp_path):
    """Before: "mrs: ...: File exists" with exit status 1, after the journals were read."""
    write_records(tmp_path / "g" / "journals", Journal.PCJ, [record(1)])
    a_file = tmp_path / "report"
    a_file.write_text("not a directory")
    for out in (a_file, a_file / "under"):
        result = run_mrs("audit", "--data-dir", str(tmp_path / "g"), "--out", str(out))
        _one_line(result, 2, "--out", str(out))
    assert a_file.read_text() == "not a directory"


@pytest.mark.parametrize(
    ("master", "reason"),
    [
        ("local[abc]", "Could not parse Master URL"),
        ("bogus://host", "Master must either be yarn or start with spark"),
    ],
)
def test_a_bad_master_url_is_one_line(tmp_path, master, reason):
    """Before: "mrs: unexpected error: Py4JJavaError: ... at org.apache.spark..." (a
    Java stack trace), or py4j's "Java gateway process exited" that says no why."""
    write_records(tmp_path / "g" / "journals", Journal.PCJ, [record(1)])
    result = run_mrs("audit", "--data-dir", str(tmp_path / "g"), "--master", master, "--quiet")
    _one_line(result, 2, master, reason, "log: ")


def test_a_window_that_ends_before_it_starts_is_one_line(tmp_path):
    """Before: an empty report and exit status 0, as if nothing had been confirmed."""
    write_records(tmp_path / "g" / "journals", Journal.PCJ, [record(1)])
    result = run_mrs("audit", "--data-dir", str(tmp_path / "g"), "--since", "2030-01-01",
                     "--until", "2020-01-01", "--json")  # fmt: skip
    _one_line(result, 2, "--since 2030-01-01 is not before --until 2020-01-01")
    assert result.stdout == ""
