"""The Spark audit on real journals: report figures equal direct counts, pushdown,
Arrow vs rows, a corrupt record, a concurrent writer process, export to Parquet.

One local Spark session serves every test here (tests/audit_fixtures.py); the
journal is made by two real `mrs serve` processes and a real client workload.
"""

from __future__ import annotations

import datetime
import time

import pyarrow.dataset as ds
import pytest

from journals import Journal, JournalStore, WriteBatch, seq_key
from mrs.audit.report import compute, export
from mrs.model import Status
from tests.audit_fixtures import (  # noqa: F401 - fixtures
    REDELIVERED,
    audit_journal,
    direct_figures,
    report_figures,
    spark,
    start_writer,
)
from tests.journal_helpers import record

pytestmark = pytest.mark.xdist_group("spark")
"""Under `pytest -n 3 --dist loadgroup` these tests share one worker, so the test
session starts one local Spark session, not one per worker."""


def _sorted_rows(frame) -> list[dict]:
    return sorted((r.asDict() for r in frame.collect()), key=lambda r: (r["group"], r["seq"]))


def test_every_report_figure_equals_a_direct_count(spark, audit_journal):  # noqa: F811
    report = compute(spark, audit_journal.sources()).as_json()
    figures = report_figures(report)
    direct = direct_figures(audit_journal.records(Journal.PCJ), audit_journal.records(Journal.DLJ))
    latency, direct_latency = figures.pop("latency"), direct.pop("latency")
    assert figures == direct
    assert latency.keys() == direct_latency.keys()
    for queue, values in latency.items():
        assert values == pytest.approx(direct_latency[queue], rel=1e-9, abs=1e-6)
    # And against what the clients saw, not only against the journal:
    seen = audit_journal.confirmed_statuses
    assert figures["confirmed"] == len(seen)
    assert figures["possdupl"] == sum(s == Status.POSSDUPL for s in seen.values()) == REDELIVERED
    assert figures["dead_letters"] == audit_journal.dead_lettered
    assert figures["dead_letters_by_reason"] == {"NO_DQF": audit_journal.dead_lettered}
    assert {(1, 1), (1, 2), (2, 1), (2, 2)} == set(figures["cross_group"])
    assert report["totals"]["possdupl_rate"] == pytest.approx(REDELIVERED / len(seen))


def test_pushdown_gives_the_same_rows_and_shows_in_the_plan(spark, audit_journal):  # noqa: F811
    pcj = [r for _, r in audit_journal.records(Journal.PCJ)]
    seqs = sorted(r.seq for r in pcj)
    times = sorted(r.confirm_time_ns for r in pcj)
    low_seq, high_seq = seqs[len(seqs) // 5], seqs[-len(seqs) // 5]
    since = datetime.datetime.fromtimestamp(times[len(times) // 4] / 1e9, datetime.UTC)

    def query(pushdown: str):
        frame = (
            spark.read.format("mrs-pcj")
            .option("pushdown", pushdown)
            .option("config", str(audit_journal.config))
            .load()
        )
        return frame.where(
            (frame.seq >= low_seq) & (frame.seq < high_seq)
            & (frame.confirm_time >= since) & frame.target_queue.isin(10, 11)
            & (frame.group == 2)
        )  # fmt: skip

    pushed, plain = query("true"), query("false")
    rows = _sorted_rows(pushed)
    assert rows == _sorted_rows(plain)
    expected = sorted(
        r.seq for g, r in audit_journal.records(Journal.PCJ)
        if g == 2 and low_seq <= r.seq < high_seq and r.confirm_time_ns // 1000 * 1000
        >= since.timestamp() * 1e9 - 1000
    )  # fmt: skip
    assert [r["seq"] for r in rows] == expected and expected
    plan = pushed._jdf.queryExecution().explainString(
        spark._jvm.org.apache.spark.sql.execution.ExplainMode.fromString("formatted")
    )
    pushed_line = next(line for line in plan.splitlines() if "PushedFilters" in line)
    for column in ("seq", "confirm_time", "target_queue", "group"):
        assert column in pushed_line
    plain_plan = plain._jdf.queryExecution().explainString(
        spark._jvm.org.apache.spark.sql.execution.ExplainMode.fromString("formatted")
    )
    assert "PushedFilters: []" in plain_plan or "PushedFilters" not in plain_plan


def test_arrow_batches_and_row_tuples_read_the_same(spark, audit_journal):  # noqa: F811
    def read(arrow: str):
        return spark.read.format("mrs-dlj").option("arrow", arrow).options(
            **audit_journal.sources()
        ).load()

    arrow_rows = _sorted_rows(read("true"))
    assert arrow_rows == _sorted_rows(read("false"))
    dead = {(g, r.seq): r for g, r in audit_journal.records(Journal.DLJ)}
    assert {(r["group"], r["seq"]) for r in arrow_rows} == set(dead)
    for row in arrow_rows:
        original = dead[(row["group"], row["seq"])]
        assert row["body"] == original.body and row["dead_letter_reason"] == "NO_DQF"
        written = row["written_time"].astimezone(datetime.UTC)  # Spark gives local naive
        assert written == datetime.datetime.fromtimestamp(
            original.written_time_ns // 1000 / 1e6, datetime.UTC
        )


def test_a_corrupt_record_is_reported_not_dropped_nor_fatal(spark, tmp_path):  # noqa: F811
    store = JournalStore(tmp_path / "g7" / "journals")
    batch = WriteBatch.empty()
    records = [record(i, target_group=7, confirm_time_ns=1_700_000_000_000_000_000 + i)
               for i in range(20)]  # fmt: skip
    for item in records:
        batch.put_record(Journal.PCJ, seq_key(item.seq), item)
    store.commit_now(batch)
    damaged_key = seq_key(records[7].seq)
    value = bytearray(store.get_raw(Journal.PCJ, damaged_key))
    value[-3] ^= 0xFF  # flip bits in the payload: the CRC no longer matches
    store.commit_now(WriteBatch.empty().put_raw(Journal.PCJ, damaged_key, bytes(value)))
    store.close()

    frame = spark.read.format("mrs-pcj").load(str(tmp_path / "g7"))
    rows = _sorted_rows(frame)
    assert len(rows) == 20
    [bad] = [r for r in rows if r["corrupt"] is not None]
    assert (bad["seq"], bad["group"], bad["corrupt"]) == (records[7].seq, 7, "checksum mismatch")
    assert bad["body"] is None
    good = {r["seq"]: r["body"] for r in rows if r["corrupt"] is None}
    assert good == {r.seq: r.body for r in records if r.seq != records[7].seq}
    report = compute(spark, {"path": str(tmp_path / "g7")}).as_json()
    assert (report["totals"]["corrupt_records"], report["totals"]["confirmed"]) == (1, 19)


def test_a_scan_while_another_process_writes_sees_a_consistent_snapshot(spark, tmp_path):  # noqa: F811
    journals = tmp_path / "g4" / "journals"
    stop = tmp_path / "stop"
    writer = start_writer(journals, stop)
    try:
        for _ in range(10):  # let it commit a few batches first
            writer.stdout.readline()
        for _ in range(2):
            before = _seqs(journals)
            frame = spark.read.format("mrs-pcj").option("recordsPerPartition", 1500).load(
                str(journals)
            )
            rows = [(r.seq, r.body, r.corrupt, r.target_queue) for r in frame.collect()]
            after = _seqs(journals)
            seqs = [seq for seq, _, _, _ in rows]
            assert len(seqs) == len(set(seqs)), "a record read twice"
            assert before <= set(seqs) <= after
            assert len(after) > len(before), "the writer kept writing during the scan"
            for seq, body, corrupt, queue in rows:
                assert (body, corrupt, queue) == (b"body %d" % seq, None, 10 + seq % 3)
    finally:
        stop.touch()
        assert writer.wait(timeout=60) == 0


def _seqs(journals) -> set[int]:
    store = JournalStore(journals, readonly=True)
    try:
        return {r.seq for _, r in store.scan(Journal.PCJ)}
    finally:
        store.close()


def test_export_writes_parquet_by_date_and_group(spark, audit_journal, tmp_path):  # noqa: F811
    written = export(spark, audit_journal.sources(), str(tmp_path / "export"))
    pcj = audit_journal.records(Journal.PCJ)
    assert written == {"pcj": len(pcj), "dlj": len(audit_journal.records(Journal.DLJ))}
    table = ds.dataset(tmp_path / "export" / "pcj", format="parquet", partitioning="hive")
    rows = table.to_table(columns=["group", "seq", "body", "date"]).to_pylist()
    assert sorted((r["group"], r["seq"], r["body"]) for r in rows) == sorted(
        (g, r.seq, r.body) for g, r in pcj
    )
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert {p.name for p in (tmp_path / "export" / "pcj").glob("date=*")} <= {
        f"date={today}",
        f"date={time.strftime('%Y-%m-%d', time.gmtime(time.time() - 86400))}",
    }
    assert {p.name for p in (tmp_path / "export" / "pcj").glob("date=*/group=*")} == {
        "group=1",
        "group=2",
    }


def test_the_docs_example_prints_what_the_journal_holds(spark, audit_journal, capsys):  # noqa: F811
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "examples" / "audit_queries.py"
    spec = importlib.util.spec_from_file_location("audit_queries", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(spark, [str(audit_journal.bus.data_dir(g)) for g in (1, 2)])
    printed = capsys.readouterr().out
    figures = direct_figures(audit_journal.records(Journal.PCJ), audit_journal.records(Journal.DLJ))
    for queue, count in figures["per_queue"].items():
        assert f"queue {queue}: {count} confirmed" in printed
    sql_line = f"SQL: {figures['confirmed']} confirmed, {figures['possdupl']} marked POSSDUPL"
    assert sql_line in printed
    assert f"dead letters NO_DQF: {figures['dead_letters']}" in printed
    assert "corrupt records: 0" in printed
