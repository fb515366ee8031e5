"""The pyarrow-only Parquet writer: hive layout by date and group, every column kept,
corrupt records reported as rows; files readable by pyarrow (Spark reads them too)."""

from __future__ import annotations

import datetime

import pyarrow.dataset as ds
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from journals import Journal, JournalStore, WriteBatch, seq_key
from mrs.audit.columns import COLUMN_NAMES, SCHEMA, batch_from_values, decode_values
from mrs.audit.parquet import write_parquet, write_records
from tests.journal_helpers import HOUR_NS, T0_NS, record

DAY_NS = 24 * HOUR_NS


def _pcj_record(index: int, day: int):
    moment = T0_NS + day * DAY_NS + index
    return record(
        index,
        confirm_time_ns=moment,
        written_time_ns=moment,
        confirm_value=index * 7,
        extra={"deliveries": 1 + index % 3},
    )


def test_records_of_two_days_land_in_two_date_partitions_with_every_field(tmp_path):
    store = JournalStore(tmp_path / "g3")
    batch = WriteBatch.empty()
    records = [_pcj_record(i, day=i % 2) for i in range(50)]
    for item in records:
        batch.put_record(Journal.PCJ, seq_key(item.seq), item)
    store.commit_now(batch)
    stored = [r for _, r in store.scan(Journal.PCJ)]
    store.close()

    files = write_records(stored, tmp_path / "out", group=3)

    day0 = datetime.datetime.fromtimestamp(T0_NS / 1e9, datetime.UTC).date()
    day1 = day0 + datetime.timedelta(days=1)
    assert sorted({f.parent.relative_to(tmp_path / "out").as_posix() for f in files}) == [
        f"date={day0}/group=3",
        f"date={day1}/group=3",
    ]
    assert not list((tmp_path / "out").rglob("*.tmp"))
    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 50
    rows = {row["seq"]: row for row in table.to_pylist()}
    for item in records:
        row = rows[item.seq]
        assert row["body"] == item.body
        assert row["body_size"] == len(item.body)
        assert row["correlation_id"] == item.correlation_id
        assert row["confirm_value"] == item.confirm_value
        assert row["target"] == f"{item.target_group}.{item.target_queue}"
        assert row["possdupl"] == (item.extra["deliveries"] > 1)
        assert row["confirm_time"].timestamp() * 1e9 == item.confirm_time_ns // 1000 * 1000
        assert row["corrupt"] is None


def test_dict_rows_and_row_limit_per_file(tmp_path):
    rows = [
        {"journal": "pcj", "group": 1, "seq": i, "confirm_time": datetime.datetime(2026, 1, 2)}
        for i in range(5)
    ]
    files = write_parquet(rows, tmp_path, rows_per_file_max=2)
    assert len(files) == 3
    assert all(f.parent.name == "group=1" and f.parent.parent.name == "date=2026-01-02"
               for f in files)
    assert sum(pq.read_metadata(f).num_rows for f in files) == 5
    assert pq.read_schema(files[0]).names == list(COLUMN_NAMES)


def test_no_rows_writes_nothing(tmp_path):
    assert write_parquet([], tmp_path / "none") == []
    assert not (tmp_path / "none").exists()


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_decode_to_a_record_or_a_reason_never_an_exception(data):
    decoded = decode_values(b"\x00" * 8, data)
    assert isinstance(decoded, (list, str))
    if isinstance(decoded, list):
        batch = batch_from_values([decoded], 1, "pcj")
        assert batch.schema == SCHEMA


def test_docs_schema_table_lists_every_column_in_order():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "audit.md").read_text()
    section = text.split("## Schema", 1)[1].split("\n## ", 1)[0]
    documented = [
        line.split("|")[1].strip().strip("`")
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    assert documented == list(COLUMN_NAMES)
