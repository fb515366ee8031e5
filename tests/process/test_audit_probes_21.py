"""Probes of the Spark audit as an auditor runs it (docs/audit.md): a trail asked for
by the correlation id `mrs dump` shows, a PCJ of large bodies, the export of a group
that never dead-lettered, an export into a directory that is not empty, the PCJ
archive's records in the report, and the data source's options with bad values.

Real LMDB journals, the real `mrs` command in child processes; the one local Spark
session of the test session (tests/audit_fixtures.py) for the report and export.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from journals import Journal, JournalStore, WriteBatch, seq_key
from mrs.audit import scan
from mrs.audit.report import compute, export
from tests.audit_fixtures import SPARK_SESSION, spark  # noqa: F401 - fixture
from tests.cli_helpers import run_mrs
from tests.journal_helpers import T0_NS, record, write_records

ROOT = Path(__file__).resolve().parents[2]
GROUP_1_SEQ = 1 << 49
"""The first seq group 1 hands out (group << 49 | counter)."""


def _one_line(result: subprocess.CompletedProcess, status: int, *words: str) -> None:
    """The command exited with `status` and said one line holding `words`."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == status, result.stderr
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_trail_takes_the_correlation_id_mrs_dump_shows(tmp_path: Path) -> None:
    """Before: `--trail hex:fffe2d31` (what `mrs dump` prints for an id that is not
    UTF-8) found nothing, exit 1; the id's own bytes on the command line were
    "unexpected error: UnicodeEncodeError"."""
    ids = [b"\xff\xfe-%d" % i for i in range(3)]
    data_dir = tmp_path / "g1"
    write_records(data_dir / "journals", Journal.PCJ,
                  [record(i, correlation_id=cid) for i, cid in enumerate(ids)])  # fmt: skip
    dumped = run_mrs("dump", "pcj", "--data-dir", str(data_dir), "--json")
    shown = [json.loads(line)["correlation_id"] for line in dumped.stdout.splitlines()]
    assert shown[1] == "hex:" + ids[1].hex()
    where = ("audit", "--data-dir", str(data_dir), "--quiet")
    for typed in (shown[1], os.fsdecode(ids[1])):  # as dump shows it; its raw bytes
        found = run_mrs(*where, "--trail", typed, "--json")
        assert found.returncode == 0, found.stderr
        trail = json.loads(found.stdout)
        assert trail["correlation_id"] == shown[1]
        assert {e["seq"] for e in trail["events"]} == {record(1).seq}
        assert sorted(e["event"] for e in trail["events"]) == ["confirm", "delivered", "put"]
    _one_line(run_mrs(*where, "--trail", "hex:zz"), 2, "--trail", "not hex")


def test_a_group_that_never_confirmed_is_named_by_its_dqf(tmp_path: Path) -> None:
    """Before: a data directory named without digits whose PCJ is empty (every message
    still waiting) read as group 0: "in group 0's DQF", `group` 0 in every row."""
    data_dir = tmp_path / "nyc"
    write_records(data_dir / "journals", Journal.DQF, [
        record(i, seq=(5 << 49) + i, target_group=5, source_group=5) for i in range(3)
    ])  # fmt: skip
    trail = run_mrs("audit", "--data-dir", str(data_dir), "--trail", "corr-1", "--json",
                    "--quiet")  # fmt: skip
    assert trail.returncode == 0, trail.stderr
    events = json.loads(trail.stdout)["events"]
    assert {(e["journal"], e["group"]) for e in events} == {("dqf", 5)}
    assert "in group 5's DQF" in events[-1]["detail"]


def _large_bodies_pcj(data_dir: Path, count: int, body_bytes: int) -> None:
    """A PCJ of `count` confirmed messages of `body_bytes` each (the default
    message_bytes_max is 1 MiB), in commits of 16."""
    journals = data_dir / "journals"
    journals.mkdir(parents=True)
    store = JournalStore(journals, map_size_bytes=2 * count * body_bytes + (64 << 20))
    body = os.urandom(body_bytes)
    try:
        for start in range(0, count, 16):
            batch = WriteBatch.empty()
            for index in range(start, min(count, start + 16)):
                item = record(index, body=body)
                batch.put_record(Journal.PCJ, seq_key(item.seq), item)
            store.commit_now(batch)
    finally:
        store.close()


DATA_LIMIT = """
import resource, sys
limit = int(sys.argv.pop(1))
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
from mrs.tools.entry import main
sys.argv[0] = "mrs"
sys.exit(main())
"""
"""`mrs ARGS` with its heap (RLIMIT_DATA) bounded: LMDB's file mapping does not count."""


def test_an_audit_of_one_mib_bodies_reads_in_bounded_memory(tmp_path: Path) -> None:
    """Before: the reader decoded 8192 records per batch whatever their size, so an
    audit held 8192 bodies at once: 160 MiB of bodies did not fit in 800 MiB of heap,
    and 2,100 of 1 MiB (2 GiB in one batch) were "unexpected error: TypeError: Cannot
    convert pyarrow.lib.ChunkedArray to pyarrow.lib.Array" after 9.5 GB resident."""
    data_dir = tmp_path / "g1"
    _large_bodies_pcj(data_dir, count=160, body_bytes=1 << 20)
    done = subprocess.run(
        [sys.executable, "-c", DATA_LIMIT, str(600 << 20), "audit", "--data-dir",
         str(data_dir), "--trail", "corr-150", "--quiet"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"pcj:1:{record(150).seq}  confirm:" in done.stdout
    part = scan.plan([(str(data_dir), 1)], "pcj", settle_s=0)[0]
    sizes = [batch.num_rows for batch in scan.scan_batches(part)]
    assert sum(sizes) == 160 and max(sizes) <= scan.BATCH_BYTES_MAX // (1 << 20)


@SPARK_SESSION
def test_export_of_a_group_that_never_dead_lettered_reads_back(spark, tmp_path: Path) -> None:  # noqa: F811
    """Before: `DIR/dlj` of a group with no dead letters held no Parquet file, so the
    docs' query `spark.read.parquet(DIR/dlj).where("date >= ... AND group = 1")`
    failed with UNABLE_TO_INFER_SCHEMA, and pyarrow read a table of no columns."""
    data_dir = tmp_path / "g1"
    write_records(data_dir / "journals", Journal.PCJ, [record(i) for i in range(3)])
    out = tmp_path / "parquet"
    written = export(spark, {"paths": json.dumps([str(data_dir / "journals")])}, str(out))
    assert written == {"pcj": 3, "dlj": 0}
    query = "date >= '2020-01-01' AND group = 1"
    counts = {name: spark.read.parquet(str(out / name)).where(query).count()
              for name in ("pcj", "dlj")}  # fmt: skip
    assert counts == {"pcj": 3, "dlj": 0}
    pcj, dlj = (spark.read.parquet(str(out / name)) for name in ("pcj", "dlj"))
    assert sorted(dlj.columns) == sorted(pcj.columns)
    assert all(dlj.schema[name].dataType == pcj.schema[name].dataType for name in pcj.columns)
    table = ds.dataset(out / "dlj", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 0 and {"seq", "group", "date"} <= set(table.schema.names)


def test_export_into_a_directory_that_is_not_empty_stops_before_spark(tmp_path: Path) -> None:
    """Before: Spark started first (seconds), its log was added to the directory the
    operator was then told was left alone, and the refusal came after it."""
    write_records(tmp_path / "g1" / "journals", Journal.PCJ, [record(1)])
    out = tmp_path / "last-month"
    out.mkdir()
    (out / "pcj").mkdir()
    result = run_mrs("audit", "export", "--data-dir", str(tmp_path / "g1"), "--out", str(out))
    _one_line(result, 2, str(out), "is not empty", "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["pcj"]
    both = run_mrs("audit", "--config", str(tmp_path / "bus.toml"), "--group", "1",
                   "--data-dir", str(tmp_path / "g1"))  # fmt: skip
    _one_line(both, 2, "give --group or --data-dir, not both")


def _archived_middle(data_dir: Path) -> list[int]:
    """Three confirmed messages of one sender to one queue; the middle one, confirmed
    first, moved to the PCJ archive by `mrs pcj archive` (as the server's automatic
    archive does). Returns their seqs."""
    confirmed_ns = [T0_NS + 10 * 3_600_000_000_000, T0_NS, T0_NS + 10 * 3_600_000_000_000]
    items = [record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=confirmed_ns[i],
                    correlation_id=b"ARC-%d" % i) for i in range(3)]  # fmt: skip
    write_records(data_dir / "journals", Journal.PCJ, items)
    until = datetime.datetime.fromtimestamp(T0_NS / 1e9 + 60, datetime.UTC)
    moved = run_mrs("pcj", "archive", "--data-dir", str(data_dir), "--group", "1",
                    "--until", until.isoformat(), "--json")  # fmt: skip
    assert moved.returncode == 0 and json.loads(moved.stdout)["archived"] == 1, moved.stderr
    return [item.seq for item in items]


@SPARK_SESSION
def test_archived_pcj_records_are_confirmed_not_missing(spark, tmp_path: Path) -> None:  # noqa: F811
    """Before: the audit read the live PCJ only, so each message the archive had moved
    was missing (a gap charged to its sender, a missing correlation number) and no
    longer confirmed; `--trail` of it said "no record"."""
    data_dir = tmp_path / "g1"
    seqs = _archived_middle(data_dir)
    report = compute(spark, {"paths": json.dumps([str(data_dir / "journals")])}).as_json()
    totals = report["totals"]
    assert (totals["confirmed"], totals["missing"], totals["gaps"]) == (3, 0, 0)
    assert totals["correlation_missing_numbers"] == 0
    assert report["reconciliation_sender"] == [
        {"source": "1.13", "stored": 3, "confirmed": 3, "dead_lettered": 0, "in_dqf": 0,
         "in_saf": 0, "missing": 0, "duplicates": 0}
    ]  # fmt: skip
    trail = run_mrs("audit", "--data-dir", str(data_dir), "--trail", "ARC-1", "--json",
                    "--quiet")  # fmt: skip
    assert trail.returncode == 0, trail.stderr
    events = json.loads(trail.stdout)["events"]
    assert {(e["journal"], e["seq"]) for e in events} == {("pcj", seqs[1])}
    (data_dir / "pcj-archive" / "date=2020-01-01").mkdir()
    (data_dir / "pcj-archive" / "date=2020-01-01" / "part-x.parquet").write_bytes(b"garbage")
    damaged = run_mrs("audit", "--data-dir", str(data_dir), "--trail", "ARC-1", "--quiet")
    _one_line(damaged, 1, "PCJ archive", "not readable as Parquet")


@SPARK_SESSION
def test_since_does_not_make_messages_confirmed_before_it_missing(spark, tmp_path: Path) -> None:  # noqa: F811
    """Before: with `--since`, a counter whose record was confirmed before the window
    was "missing": one message still waiting in the DQF from before made every seq
    confirmed between it and the window's first a lost message (and a missing
    correlation number). A counter no journal holds is still reported."""
    hour_ns = 3_600_000_000_000
    early, late = T0_NS, T0_NS + 10 * hour_ns
    confirmed = {1: early, 2: early, 3: early, 4: late, 5: late, 7: late}  # 6: lost
    journals = tmp_path / "g1" / "journals"
    write_records(journals, Journal.DQF, [record(0, seq=GROUP_1_SEQ, correlation_id=b"W-0")])
    write_records(journals, Journal.PCJ, [
        record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=at, correlation_id=b"W-%d" % i)
        for i, at in confirmed.items()
    ])  # fmt: skip
    since = datetime.datetime.fromtimestamp((early + hour_ns) / 1e9, datetime.UTC)
    report = compute(spark, {"paths": json.dumps([str(journals)])}, since=since).as_json()
    totals = report["totals"]
    assert (totals["confirmed"], totals["in_dqf"], totals["missing"]) == (3, 1, 1)
    assert [(g["after_seq"], g["before_seq"]) for g in report["gaps"]] == [
        (GROUP_1_SEQ + 5, GROUP_1_SEQ + 7)
    ]
    [row] = report["correlation"]
    assert (row["first_number"], row["last_number"], row["missing_numbers"]) == (0, 7, 1)
    assert (row["messages"], row["numbers"], row["confirmed"]) == (4, 4, 3)


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("batchRows", "x", "option batchRows: not a whole number: 'x'"),
        ("recordsPerPartition", "0", "option recordsPerPartition: 0 is below its minimum 1"),
        ("pushdown", "yes", "option pushdown: give true or false, not 'yes'"),
        ("snapshotSettleMs", "inf", "option snapshotSettleMs: not a number: 'inf'"),
    ],
)
@SPARK_SESSION
def test_a_bad_option_value_of_the_data_source_names_the_option(
    spark,  # noqa: F811
    tmp_path: Path,
    option: str,
    value: str,
    words: str,
) -> None:
    """Before: "invalid literal for int() with base 10: 'x'" (batchRows only inside a
    failed task's Java stack), `pushdown=yes` turned pushdown off unsaid, and
    `snapshotSettleMs=inf` was "OverflowError: timestamp too large"."""
    data_dir = tmp_path / "g1"
    write_records(data_dir / "journals", Journal.PCJ, [record(1)])
    with pytest.raises(Exception) as raised:
        spark.read.format("mrs-pcj").option(option, value).load(str(data_dir)).count()
    assert words in str(raised.value)


K8S_LOG = """\
spark ERROR SparkContext: Error initializing SparkContext.
io.fabric8.kubernetes.client.KubernetesClientException: An error has occurred.
\tat io.fabric8.kubernetes.client.KubernetesClientException.launderThrowable(...)
Caused by: java.io.IOException: Connection refused: /127.0.0.1:1
\t... 20 more
Caused by: java.net.ConnectException: Connection refused
"""
"""What Spark's log held for `--master k8s://https://127.0.0.1:1` (nothing listening)."""


def test_a_kubernetes_master_that_does_not_answer_says_why(tmp_path: Path) -> None:
    """Before: "Spark did not start with --master k8s://...: An error occurred while
    calling None.org.apache.spark.api.java.JavaSparkContext." (py4j's words)."""
    from py4j.protocol import Py4JError

    from mrs.audit.command import spark_start_line

    log = tmp_path / "spark.log"
    log.write_text(K8S_LOG)
    error = Py4JError("An error occurred while calling None.org.apache.spark.api.java."
                      "JavaSparkContext.")  # fmt: skip
    assert spark_start_line(error, log) == "Connection refused: /127.0.0.1:1"


def test_a_standalone_master_that_does_not_answer_is_named_at_once(tmp_path: Path) -> None:
    """Before: Spark retried `spark://127.0.0.1:PORT` (nothing listening) for 72 s and
    then said "All masters are unresponsive! Giving up." without the address."""
    import socket
    import time

    write_records(tmp_path / "g1" / "journals", Journal.PCJ, [record(1)])
    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = run_mrs("audit", "--data-dir", str(tmp_path / "g1"),
                     "--master", f"spark://127.0.0.1:{port}")  # fmt: skip
    _one_line(result, 2, "no Spark master answers", f"127.0.0.1:{port}", "refused")
    assert time.monotonic() - started < 30
    bad = run_mrs("audit", "--data-dir", str(tmp_path / "g1"), "--master", "spark://nohost")
    _one_line(bad, 2, "'nohost' is not HOST:PORT")
