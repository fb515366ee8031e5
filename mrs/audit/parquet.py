"""Journal records to Parquet, partitioned by date and group, files fsynced (pyarrow only).

Used by `mrs audit export` and by the PCJ archive (`mrs pcj archive`). The columns
are the audit schema of `mrs.audit.columns` (the same names the `mrs-pcj` Spark
format shows), plus the two partition columns in the directory names:

    OUT_DIR/date=YYYY-MM-DD/group=N/<prefix>-<uuid>.parquet

`date` is the UTC day of `confirm_time` (PCJ) or, where there is none, `written_time`
(DLJ). Spark, pyarrow and DuckDB all read that layout as a hive-partitioned dataset.

Why fsync: an archive that deletes journal records after writing them must never
delete what the disk does not yet hold. Each file is written to a temporary name,
fsynced, renamed into place, and its directory (and each new parent) fsynced.

Signatures (the contract other modules call):

    write_parquet(rows, out_dir, *, prefix="part", rows_per_file_max=1_000_000,
                  compression="zstd") -> list[Path]
        rows: a pyarrow Table or RecordBatch in the audit schema, an iterable of them,
        or an iterable of dicts keyed by column name (missing columns are null).
        Returns the files written, in partition order; nothing written for no rows.

    write_records(records, out_dir, *, group, journal="pcj", ...) -> list[Path]
        journals.Record objects of one group's journal -> the same layout.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mrs.audit.columns import SCHEMA, batch_from_records
from mrs.storage.atomic_file import fsync_path

ROWS_PER_FILE_MAX = 1_000_000


def _as_table(rows) -> pa.Table:
    if isinstance(rows, pa.Table):
        tables = [rows]
    elif isinstance(rows, pa.RecordBatch):
        tables = [pa.Table.from_batches([rows])]
    else:
        tables, dicts = [], []
        for item in rows:
            if isinstance(item, pa.Table):
                tables.append(item)
            elif isinstance(item, pa.RecordBatch):
                tables.append(pa.Table.from_batches([item]))
            else:
                dicts.append(item)
        if dicts:
            tables.append(pa.Table.from_pylist(dicts, schema=SCHEMA))
    if not tables:
        return SCHEMA.empty_table()
    return pa.concat_tables([t.select(list(SCHEMA.names)).cast(SCHEMA) for t in tables])


NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""The directory name of a null partition value (a row with no time: a corrupt
record), which Spark and pyarrow read back as null, so `date` stays a date column."""


def partition_dates(table: pa.Table) -> pa.Array:
    """The UTC day of each row: confirm_time, else written_time, else put_time (null
    for a row with none of them)."""
    moment = pc.coalesce(table["confirm_time"], table["written_time"], table["put_time"])
    return pc.strftime(moment, format="%Y-%m-%d", locale="C")


def _make_dirs(directory: Path) -> None:
    """mkdir -p, fsyncing each parent whose entries changed."""
    missing = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        fsync_path(path.parent)


def _write_file(table: pa.Table, directory: Path, prefix: str, compression: str) -> Path:
    _make_dirs(directory)
    final = directory / f"{prefix}-{uuid.uuid4().hex}.parquet"
    temporary = directory / f".{final.name}.tmp"
    pq.write_table(table, temporary, compression=compression)
    fsync_path(temporary)
    os.replace(temporary, final)
    fsync_path(directory)
    return final


def _matches(column, value) -> pa.Array:
    return pc.is_null(column) if value is None else pc.equal(column, value)


def _partition_name(value) -> str:
    return NULL_PARTITION if value is None else str(value)


def write_parquet(
    rows,
    out_dir: Path | str,
    *,
    prefix: str = "part",
    rows_per_file_max: int = ROWS_PER_FILE_MAX,
    compression: str = "zstd",
) -> list[Path]:
    """Write rows as hive-partitioned Parquet (date=/group=) under out_dir; see module doc."""
    if rows_per_file_max < 1:
        raise ValueError("rows_per_file_max must be at least 1")
    table = _as_table(rows)
    if table.num_rows == 0:
        return []
    out_dir = Path(out_dir)
    dates = partition_dates(table)
    keyed = table.append_column("_date", dates)
    written: list[Path] = []
    keys = pa.Table.from_arrays([dates, table["group"]], names=["date", "group"])
    for key in (
        keys.group_by(["date", "group"])
        .aggregate([])
        .sort_by([("date", "ascending"), ("group", "ascending")])
        .to_pylist()
    ):
        mask = pc.and_(
            _matches(keyed["_date"], key["date"]), _matches(keyed["group"], key["group"])
        )
        part = keyed.filter(mask).drop_columns(["_date"])
        directory = (out_dir / f"date={_partition_name(key['date'])}"
                     / f"group={_partition_name(key['group'])}")  # fmt: skip
        for start in range(0, part.num_rows, rows_per_file_max):
            chunk = part.slice(start, rows_per_file_max)
            written.append(_write_file(chunk, directory, prefix, compression))
    return written


def write_records(
    records: Iterable,
    out_dir: Path | str,
    *,
    group: int,
    journal: str = "pcj",
    prefix: str = "part",
    rows_per_file_max: int = ROWS_PER_FILE_MAX,
) -> list[Path]:
    """`journals.Record`s of one group's PCJ or DLJ -> Parquet files (see module doc)."""
    batch = batch_from_records(records, group, journal)
    return write_parquet(batch, out_dir, prefix=prefix, rows_per_file_max=rows_per_file_max)
