"""The Spark audit as a data engineer and an auditor use it: `mrs audit export` of a
PCJ that `mrs pcj archive` has partly moved to Parquet, on a local master and on a
real standalone cluster, exported twice into the same directory; and what a run
leaves behind in the temporary directory when it fails or is interrupted.

Real LMDB journals, the real `mrs` command in child processes, the test session's
one local Spark session (tests/audit_fixtures.py) and, for the cluster, a master
and a worker started with pyspark's own launcher (tests/process/test_audit_cluster.py).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds

from journals import Journal, seq_key
from mrs.audit.parquet import write_parquet
from mrs.audit.report import compute, export
from tests.audit_fixtures import SPARK_SESSION, spark  # noqa: F401 - fixture
from tests.cli_helpers import run_mrs
from tests.journal_helpers import HOUR_NS, T0_NS, record, write_raw, write_records

GROUP_1_SEQ = 1 << 49
CONFIRMED_NS = [T0_NS + (30 * HOUR_NS if i % 2 else 0) for i in range(6)]
"""Six confirmed messages of one sender, on two UTC days; the first day's three
(seq counters 0, 2, 4) are archived."""
ARCHIVE_UNTIL = "2023-11-15T12:00:00Z"
DAYS = {"2023-11-14": [0, 2, 4], "2023-11-16": [1, 3, 5]}


def _partly_archived(data_dir: Path) -> list[int]:
    """A group's PCJ of six confirmed messages, the three of the first day moved to
    `DATA_DIR/pcj-archive` by the real `mrs pcj archive`; two dead letters. Seqs."""
    items = [record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=at, body=b"body %d" % i)
             for i, at in enumerate(CONFIRMED_NS)]  # fmt: skip
    write_records(data_dir / "journals", Journal.PCJ, items)
    write_records(data_dir / "journals", Journal.DLJ,
                  [record(6 + i, seq=GROUP_1_SEQ + 6 + i) for i in range(2)])  # fmt: skip
    moved = run_mrs("pcj", "archive", "--data-dir", str(data_dir), "--group", "1",
                    "--until", ARCHIVE_UNTIL, "--json")  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["archived"] == len(DAYS["2023-11-14"])
    return [item.seq for item in items]


def _exported(out: Path, journal: str) -> list[dict]:
    dataset = ds.dataset(out / journal, format="parquet", partitioning="hive")
    return sorted(dataset.to_table().to_pylist(), key=lambda row: row["seq"])


@SPARK_SESSION
def test_export_of_a_partly_archived_pcj_has_each_confirmed_message_once(
    spark, tmp_path: Path  # noqa: F811
) -> None:
    """Before: the export read the live PCJ only: three rows where `mrs audit`
    counted six confirmed; the archived half of the history was not in it. Exported
    twice into the same directory (`--overwrite`), it holds each message once."""
    data_dir = tmp_path / "g1"
    seqs = _partly_archived(data_dir)
    sources = {"paths": json.dumps([str(data_dir)])}
    assert compute(spark, sources).as_json()["totals"]["confirmed"] == 6
    out = tmp_path / "parquet"
    for _ in range(2):
        assert export(spark, sources, str(out), mode="overwrite") == {"pcj": 6, "dlj": 2}
    rows = _exported(out, "pcj")
    assert [row["seq"] for row in rows] == seqs
    assert [row["body"] for row in rows] == [b"body %d" % i for i in range(6)]
    assert {str(row["date"]) for row in rows} == set(DAYS)
    for day, counters in DAYS.items():
        assert [r["seq"] - GROUP_1_SEQ for r in rows if str(r["date"]) == day] == counters
    assert {row["group"] for row in rows} == {1}
    assert all(row["confirm_time"].tzinfo is not None for row in rows)
    query = spark.read.parquet(str(out / "pcj")).where("date >= '2023-11-01' AND group = 1")
    assert query.count() == 6
    since = datetime.datetime(2023, 11, 15, tzinfo=datetime.UTC)
    window = export(spark, sources, str(out), since=since, mode="overwrite")
    assert window == {"pcj": 3, "dlj": 0}
    assert [row["seq"] - GROUP_1_SEQ for row in _exported(out, "pcj")] == DAYS["2023-11-16"]



@SPARK_SESSION
def test_a_record_both_archived_and_live_is_exported_once(
    spark, tmp_path: Path  # noqa: F811
) -> None:
    """An archive run stopped after writing its file and before deleting the records
    from the PCJ (the next run finishes its deletes) leaves those records in both
    places: the export wrote each twice, unmarked. Now once, from the live PCJ."""
    data_dir = tmp_path / "g1"
    _partly_archived(data_dir)
    archived = [record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=CONFIRMED_NS[i],
                       body=b"body %d" % i) for i in DAYS["2023-11-14"]]  # fmt: skip
    write_records(data_dir / "journals", Journal.PCJ, archived)  # the deletes never made
    sources = {"paths": json.dumps([str(data_dir)])}
    out = tmp_path / "parquet"
    assert export(spark, sources, str(out)) == {"pcj": 6, "dlj": 2}
    assert [row["seq"] - GROUP_1_SEQ for row in _exported(out, "pcj")] == list(range(6))


@SPARK_SESSION
def test_a_corrupt_record_exports_with_a_null_date_not_a_string_one(
    spark, tmp_path: Path  # noqa: F811
) -> None:
    """Before: the corrupt record (it has no time) went to `date=unknown`, which made
    `date` a string column and matched `date >= '2023-11-01'`: the docs' query
    counted it among each day's confirmed messages."""
    journals = tmp_path / "g1" / "journals"
    write_records(journals, Journal.PCJ, [record(i, seq=GROUP_1_SEQ + i,
                                                 confirm_time_ns=T0_NS) for i in range(3)])
    write_raw(journals, Journal.PCJ, seq_key(GROUP_1_SEQ + 9), b"\x00junk")
    out = tmp_path / "parquet"
    written = export(spark, {"paths": json.dumps([str(journals)])}, str(out))
    assert written == {"pcj": 4, "dlj": 0}
    frame = spark.read.parquet(str(out / "pcj"))
    assert frame.schema["date"].dataType.typeName() == "date"
    assert frame.where("date >= '2023-11-01' AND group = 1").count() == 3
    [corrupt] = frame.where("date IS NULL").collect()
    assert (corrupt["seq"], corrupt["group"]) == (GROUP_1_SEQ + 9, 1) and corrupt["corrupt"]
    confirmed = datetime.datetime.fromtimestamp(T0_NS / 1e9, datetime.UTC)
    write_parquet([{"journal": "pcj", "group": 1, "seq": 9, "corrupt": "bad magic"},
                   {"journal": "pcj", "group": 1, "seq": 1, "confirm_time": confirmed}],
                  tmp_path / "archive")  # fmt: skip
    dates = {row["seq"]: row["date"] for row in _exported(tmp_path, "archive")}
    assert dates == {1: "2023-11-14", 9: None}


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("mrs-audit-")
                  and p.name != "mrs-audit-log4j2.properties")  # fmt: skip


def test_a_bad_master_leaves_no_log_in_the_temporary_directory(tmp_path: Path) -> None:
    """Before: each audit whose Spark did not start kept its `mrs-audit-*.log` in
    /tmp (dozens piled up), though its one line already said the log's reason."""
    write_records(tmp_path / "g" / "journals", Journal.PCJ, [record(1)])
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = run_mrs("audit", "--data-dir", str(tmp_path / "g"), "--master", "local[abc]",
                     "--quiet", env={"TMPDIR": str(temporary)})  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "Could not parse Master URL" in lines[0] and "--out DIR" in lines[0], lines[0]
    assert _leftovers(temporary) == []


def test_ctrl_c_while_spark_starts_leaves_no_log(tmp_path: Path) -> None:
    """Before: Ctrl-C exits with `os._exit`, which skipped the removal of the
    temporary log: every interrupted audit left one in /tmp."""
    write_records(tmp_path / "g" / "journals", Journal.PCJ, [record(1)])
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "mrs", "audit", "--data-dir", str(tmp_path / "g")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(temporary)},
    )  # fmt: skip
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # the JVM is starting: its log exists
        seen.append(line)
        if "read PCJ" in line:
            break
    assert _leftovers(temporary) != [], "".join(seen)
    process.send_signal(signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 130, "".join(seen) + rest
    assert rest.strip() == "mrs audit: interrupted"
    assert _leftovers(temporary) == []


@SPARK_SESSION
def test_export_on_a_standalone_cluster_reads_the_archive_and_leaves_nothing(
    cluster, tmp_path: Path  # cluster: tests/process/conftest.py
) -> None:
    """`mrs audit export --master spark://...`: the executors read the live PCJ with
    the shipped code and the archive's Parquet files; the same six rows as local.
    Before: only the live three, and the shipped code zip (~740 KB) stayed in /tmp
    after every cluster run."""
    url, _work = cluster
    data_dir = tmp_path / "g1"
    seqs = _partly_archived(data_dir)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    out = tmp_path / "parquet"
    result = run_mrs("audit", "export", "--master", url, "--data-dir", str(data_dir),
                     "--out", str(out), "--json", "--quiet", timeout_s=600,
                     env={"TMPDIR": str(temporary)})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["rows"] == {"pcj": 6, "dlj": 2}
    assert [row["seq"] for row in _exported(out, "pcj")] == seqs
    assert len(_exported(out, "dlj")) == 2
    assert _leftovers(temporary) == []
