"""The audit report: Spark computes the figures over the PCJ and DLJ of some groups.

Figures (each a small table, collected to the driver):
- `totals`: confirmed messages, dead letters, POSSDUPL count and rate, replayed
  messages, corrupt records, first and last confirm time;
- `per_queue` (target queue), `per_sender` (source queue), `per_hour` (confirm hour,
  UTC): confirmed messages;
- `cross_group`: confirmed messages per (source group, target group);
- `latency`: confirm latency (confirm_time - put_time, ms) p50/p95/p99 per target
  queue, exact percentiles with linear interpolation (Spark's `percentile`);
- `dead_letters`: dead letters per reason.

The journal is read through the `mrs-pcj`/`mrs-dlj` formats; `since`/`until` bound
the confirm time (PCJ) and the dead-lettering time (DLJ), pushed into the scan.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

TABLES = (
    "reconciliation_queue",
    "reconciliation_sender",
    "per_queue",
    "per_sender",
    "per_hour",
    "cross_group",
    "latency",
    "dead_letters",
    "gaps",
    "duplicates",
    "correlation",
)


@dataclass
class Report:
    totals: dict
    tables: dict[str, list[dict]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What the reader must know to read the figures (e.g. confirms not journaled)."""
    named: bool = False
    """The config's queue names are beside the addresses (`name_addresses`)."""

    def as_json(self) -> dict:
        tables = {k: _plain(v) for k, v in self.tables.items()}
        return {"totals": _plain(self.totals), **tables, "notes": list(self.notes)}


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    return value


def _reader(spark, fmt: str, sources: dict[str, str]):
    reader = spark.read.format(fmt)
    for key, value in sources.items():
        reader = reader.option(key, value)
    return reader.load()


def _bounded(frame, column: str, since, until):
    """`frame`'s rows whose `column` is inside `since`/`until` (both inclusive), and
    every corrupt row (its time is unreadable: in every window, as the report's
    `audit_frame` counts it). Why: `mrs audit export --since 30d` over a damaged PCJ or
    DLJ wrote none of its corrupt rows, which the export without a window keeps."""
    from pyspark.sql import functions as F

    if since is None and until is None:
        return frame
    inside = F.lit(True)
    if since is not None:
        inside = inside & (F.col(column) >= F.lit(since))
    if until is not None:  # inclusive, as in every tool: an --until pasted from a record keeps it
        inside = inside & (F.col(column) <= F.lit(until))
    if "corrupt" in frame.columns:
        inside = F.col("corrupt").isNotNull() | F.coalesce(inside, F.lit(False))
    return frame.where(inside)


def journals(spark, sources: dict[str, str], since=None, until=None):
    """(pcj, dlj) DataFrames over the sources, time-bounded, corrupt rows included."""
    pcj = _bounded(_reader(spark, "mrs-pcj", sources), "confirm_time", since, until)
    dlj = _bounded(_reader(spark, "mrs-dlj", sources), "written_time", since, until)
    return pcj, dlj


def _rows(frame) -> list[dict]:
    return [row.asDict() for row in frame.collect()]


def audit_frame(spark, sources: dict[str, str], since=None, until=None, *, table=None,
                progress=None):  # fmt: skip
    """The audit's one DataFrame.

    Local master: every journal is read on the driver into one Arrow table (`table`,
    or `mrs.audit.load.read_journals` here) and Spark gets it as one relation. Other
    masters (`table` None and a master that is not local): the executors read the PCJ and
    DLJ through the `mrs-pcj`/`mrs-dlj` formats and the driver reads the DQF and SAF
    (a backlog, small beside the journals of what happened).

    Every record is in it, with `in_window`: true for the DQF and SAF (the backlog
    now), for PCJ/DLJ records inside `since`/`until`, and for a corrupt record (its
    time is unreadable: `corrupt_records` counts it in every window; it was counted
    only with no window at all, so `--since 30d` over a damaged PCJ or DLJ said 0
    corrupt records). The counts read the rows in
    the window; the gap and correlation checks read them all, since a counter whose
    record was confirmed before `--since` is held, not missing (it was: a message
    waiting in a DQF since last month made every seq confirmed between it and this
    month's first a "missing" message)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from journals import Journal
    from mrs.audit.load import read_archives, read_journals
    from mrs.audit.session import is_local

    if table is None and is_local(spark.sparkContext.master):
        table = read_journals(sources, progress=progress)
    if table is not None:
        table = table.select(list(SPARK_COLUMNS))
        frame = spark.createDataFrame(table) if table.num_rows else _empty(spark)
    else:
        table = read_journals(sources, (Journal.SAF, Journal.DQF), progress, archived=False)
        pcj, dlj = (_reader(spark, fmt, sources).drop("body") for fmt in ("mrs-pcj", "mrs-dlj"))
        pcj = read_live_first(pcj)
        frame = pcj.unionByName(dlj)
        if table.num_rows:
            frame = frame.unionByName(spark.createDataFrame(table))
        if archived := read_archives(sources, progress):  # one message if also live
            rows = spark.createDataFrame(pa.Table.from_batches(archived))
            live = pcj.select("group", "seq")
            frame = frame.unionByName(rows.join(live, on=["group", "seq"], how="left_anti"))
    in_window = F.lit(True)
    if since is not None or until is not None:
        moment = F.when(F.col("journal") == "pcj", F.col("confirm_time")).when(
            F.col("journal") == "dlj", F.col("written_time")
        )
        # the backlog now, and a record whose time is unreadable: in every window
        always = F.col("journal").isin("dqf", "saf") | F.col("corrupt").isNotNull()
        inside = F.lit(True)
        if since is not None:
            inside = inside & (moment >= F.lit(since))
        if until is not None:  # inclusive (`_bounded`)
            inside = inside & (moment <= F.lit(until))
        in_window = F.coalesce(always | inside, F.lit(False))
    frame = frame.select(*SPARK_COLUMNS, in_window.alias("in_window"))
    return frame.cache()  # read by two jobs: converted from Arrow once


SPARK_COLUMNS = ("journal", "group", "seq", "source", "source_group", "target", "target_group",
                 "put_time", "confirm_time", "written_time", "possdupl", "replayed_from",
                 "body_size", "dead_letter_reason", "correlation_id", "corrupt")  # fmt: skip
"""What the report's queries read: Spark is handed no other column."""


def _empty(spark):
    from mrs.audit.load import AUDIT_SCHEMA
    from mrs.audit.source import SPARK_SCHEMA

    schema = SPARK_SCHEMA.__class__(
        [f for f in SPARK_SCHEMA.fields if f.name in AUDIT_SCHEMA.names]
    )
    return spark.createDataFrame([], schema)


def compute(spark, sources: dict[str, str], since=None, until=None, *, table=None,
            names: dict[str, str] | None = None, progress=None) -> Report:  # fmt: skip
    """Every figure of the report (see module doc), in two Spark jobs."""
    from mrs.audit import reconcile
    from mrs.audit.load import unjournaled_confirm_notes

    say = progress or (lambda _text: None)
    frame = audit_frame(spark, sources, since, until, table=table, progress=progress)
    say("counting per queue, sender, hour; latency")
    counts = _rows(spark.sql(_COUNTS_SQL.replace("{hour_us}", str(HOUR_US)),
                             frame=frame.where("in_window")))
    latency = _latency(counts)
    say("sequence gaps and duplicates; correlation ids")
    sequence, correlation, corrupt_seqs = reconcile.check_rows(spark, frame)
    checks = reconcile.sequence_checks(sequence, corrupt_seqs)
    report = assemble(counts, latency, checks, correlation)
    report.notes.extend(unjournaled_confirm_notes(sources))
    if names:
        name_addresses(report, names)
    return report


_COUNTS_SQL = """
SELECT 'fine' AS kind, journal, bad, source, target, source_group, target_group,
       dead_letter_reason, NULL AS hour, count(1) AS n,
       sum(CAST(possdupl AS INT)) AS possdupl, count(replayed_from) AS replayed,
       unix_micros(min(confirm_time)) AS first_confirm,
       unix_micros(max(confirm_time)) AS last_confirm,
       sum(body_size) AS body_bytes,
       NULL AS p50_ms, NULL AS p95_ms, NULL AS p99_ms, NULL AS max_ms
FROM (SELECT *, corrupt IS NOT NULL AS bad FROM {frame})
GROUP BY journal, bad, source, target, source_group, target_group, dead_letter_reason
UNION ALL
SELECT 'hour', 'pcj', false, NULL, NULL, NULL, NULL, NULL,
       unix_micros(confirm_time) DIV {hour_us} * {hour_us}, count(1), NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL
FROM {frame} WHERE journal = 'pcj' AND corrupt IS NULL
GROUP BY unix_micros(confirm_time) DIV {hour_us}
UNION ALL
SELECT 'latency', 'pcj', false, NULL, target, NULL, NULL, NULL, NULL, count(1), NULL, NULL,
       NULL, NULL, NULL, percentile(latency_ms, 0.5), percentile(latency_ms, 0.95),
       percentile(latency_ms, 0.99), max(latency_ms)
FROM (SELECT target, CAST(unix_micros(confirm_time) - unix_micros(put_time) AS DOUBLE) / 1000.0
               AS latency_ms
      FROM {frame} WHERE journal = 'pcj' AND corrupt IS NULL)
GROUP BY target
"""
"""One job for every count and the latency, three aggregations side by side: the
fine grain (journal, sender, queue, groups, reason) that totals, per_queue,
per_sender, cross_group, dead_letters and the reconciliation are summed from on the
driver; the confirm hour for per_hour; the target queue for the exact latency
percentiles (linear interpolation, as Spark's `percentile`).

Times come back as microseconds since the epoch (`utc_micros` makes them UTC
datetimes), the hour by integer division, not `date_trunc`. Why: Spark hands a
timestamp to Python as a naive datetime in the Python process's local time zone,
which the report then labelled UTC: on a machine whose zone is not UTC every confirm
time and hour of the report was off by the zone's offset (and `date_trunc` cut hours
in the session's zone)."""
HOUR_US = 3_600_000_000


def utc_micros(value: int | None) -> datetime.datetime | None:
    """Microseconds since the epoch (a count's time) as an aware UTC datetime."""
    if value is None:
        return None
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        microseconds=value
    )


def _latency(counts: list[dict]) -> list[dict]:
    rows = [r for r in counts if r["kind"] == "latency"]
    keys = ("p50_ms", "p95_ms", "p99_ms", "max_ms")
    rows = [{"target": r["target"], "messages": r["n"], **{k: r[k] for k in keys}}
            for r in rows]  # fmt: skip
    return sorted(rows, key=lambda r: _order(r["target"]))


def _tally(rows: list[dict], key) -> list[tuple]:
    found: dict = {}
    for row in rows:
        found[key(row)] = found.get(key(row), 0) + row["n"]
    return sorted(found.items(), key=lambda item: _order(item[0]))


def _order(key) -> tuple:
    """Sort keys that may hold None (last) beside values of one type."""
    values = key if isinstance(key, tuple) else (key,)
    return tuple((v is None, 0 if v is None else v) for v in values)


def assemble(counts: list[dict], latency: list[dict], checks: dict, correlation: list[dict]):
    """The report from the jobs' small results (no Spark here)."""
    from mrs.audit import reconcile
    from mrs.limits import AUDIT_LISTED_MAX

    fine = [r for r in counts if r["kind"] == "fine"]
    sound = [r for r in fine if not r["bad"]]
    pcj = [r for r in sound if r["journal"] == "pcj"]
    dlj = [r for r in sound if r["journal"] == "dlj"]
    hours = [r for r in counts if r["kind"] == "hour"]
    tables = {
        "per_queue": [{"target": k, "messages": n} for k, n in _tally(pcj, lambda r: r["target"])],
        "per_sender": [{"source": k, "messages": n} for k, n in _tally(pcj, lambda r: r["source"])],
        "per_hour": [{"hour": utc_micros(k), "messages": n}
                     for k, n in _tally(hours, lambda r: r["hour"]) if k is not None],  # fmt: skip
        "cross_group": [{"source_group": k[0], "target_group": k[1], "messages": n}
                        for k, n in _tally(pcj, lambda r: (r["source_group"],
                                                           r["target_group"]))],  # fmt: skip
        "latency": latency,
        "dead_letters": sorted(
            ({"dead_letter_reason": k, "messages": n}
             for k, n in _tally(dlj, lambda r: r["dead_letter_reason"])),
            key=lambda r: (-r["messages"], str(r["dead_letter_reason"]))),  # fmt: skip
        "reconciliation_queue": reconcile.reconciliation(
            sound, checks, "target", checks["missing_by_queue"]),
        "reconciliation_sender": reconcile.reconciliation(
            sound, checks, "source", checks["missing_by_sender"]),
        "gaps": checks["gaps"][: AUDIT_LISTED_MAX],
        "duplicates": checks["duplicates"][: AUDIT_LISTED_MAX],
        "correlation": correlation,
    }  # fmt: skip
    return Report(_totals(fine, pcj, dlj, sound, checks, correlation), tables)


def _totals(fine, pcj, dlj, sound, checks, correlation) -> dict:
    confirmed = sum(r["n"] for r in pcj)
    possdupl = sum(r["possdupl"] or 0 for r in pcj)
    firsts = [r["first_confirm"] for r in pcj if r["first_confirm"] is not None]
    lasts = [r["last_confirm"] for r in pcj if r["last_confirm"] is not None]
    return {
        "confirmed": confirmed,
        "dead_letters": sum(r["n"] for r in dlj),
        "possdupl": possdupl,
        "possdupl_rate": possdupl / confirmed if confirmed else 0.0,
        "replayed": sum(r["replayed"] for r in pcj),
        "corrupt_records": sum(r["n"] for r in fine if r["bad"]),
        "body_bytes": sum(r["body_bytes"] or 0 for r in pcj),
        "first_confirm": utc_micros(min(firsts, default=None)),
        "last_confirm": utc_micros(max(lasts, default=None)),
        "in_dqf": sum(r["n"] for r in sound if r["journal"] == "dqf"),
        "in_saf": sum(r["n"] for r in sound if r["journal"] == "saf"),
        "missing": sum(checks["missing_by_sender"].values()) + checks["unattributed"],
        "missing_unattributed": checks["unattributed"],
        "gaps": len(checks["gaps"]),
        "duplicates": len(checks["duplicates"]),
        "checks_truncated": checks["truncated"],
        "correlation_missing_numbers": sum(r["missing_numbers"] for r in correlation),
        "correlation_duplicate_confirms": sum(r["duplicate_confirms"] for r in correlation),
    }


NAMED_COLUMNS = ("target", "source", "sender", "queue")


def name_addresses(report: Report, names: dict[str, str]) -> None:
    """Beside each GROUP.QUEUE column, its `_name` from the config (GROUP.NAME)."""
    report.named = True
    for rows in report.tables.values():
        for row in rows:
            for column in NAMED_COLUMNS:
                if column in row and isinstance(row[column], str | type(None)):
                    row[f"{column}_name"] = names.get(row[column] or "", row[column])


def archived_pcj(spark, sources: dict[str, str]):
    """The PCJ archives' rows (`mrs pcj archive`'s Parquet files) of the groups
    `sources` names, body included, as a DataFrame in the formats' schema; None if no
    group has one. Read by Spark from the files (on a cluster, the executors), each
    row's `group` the group whose archive holds it, as `mrs.audit.load` reads them.

    Why: export read the live PCJ only, so every record the archive (or the server's
    automatic archive) had moved was missing from the export while `mrs audit` counted
    it confirmed: the export of a partly archived PCJ disagreed with the report."""
    from pyspark.sql import functions as F

    from mrs.audit.load import archive_files
    from mrs.audit.source import SPARK_SCHEMA

    frames = []
    found = archive_files(sources)
    for group, files, only in found:
        frame = spark.read.schema(SPARK_SCHEMA).parquet(*map(str, files))
        if only is not None:  # a `pcj_archive_dir` may be shared by groups
            frame = frame.where(F.col("group") == only)
        frames.append(frame.withColumn("group", F.lit(group).cast("int")))
    if not frames:
        return None
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    if len({group for group, _, _ in found}) < len(found):  # a replicated group's archives
        union = union.dropDuplicates(["group", "seq"])  # (`mrs.audit.load.read_archives`)
    return union


def export(spark, sources: dict[str, str], out_dir: str, since=None, until=None,
           mode: str = "errorifexists") -> dict[str, int]:  # fmt: skip
    """Both journals to Parquet under out_dir/{pcj,dlj}, partitioned by date and group
    (the layout `mrs.audit.parquet` writes), the PCJ with its archive's rows (as the
    report counts them); rows written per journal.

    A journal with no rows in the window (a group that never dead-lettered) is one
    Parquet file of no rows with the schema, `date` and `group` among its columns:
    partitioned, Spark wrote no file at all, and `spark.read.parquet(DIR/dlj)` failed
    with UNABLE_TO_INFER_SCHEMA (pyarrow read a table with no columns)."""
    from pyspark.sql import functions as F

    pcj, dlj = journals(spark, sources, since, until)
    pcj = live_pcj = read_live_first(pcj)
    archived = archived_pcj(spark, sources)
    if archived is not None:
        # A record both archived and still in the live PCJ (an archive run stopped
        # after writing its file, before its deletes: the next run finishes them) is
        # one message: exported once, from the live PCJ.
        live = pcj.select("group", "seq")
        only_archived = archived.join(live, on=["group", "seq"], how="left_anti")
        pcj = pcj.unionByName(_bounded(only_archived, "confirm_time", since, until))
    written = {}
    for name, frame in (("pcj", pcj), ("dlj", dlj)):
        moment = F.coalesce("confirm_time", "written_time", "put_time")
        # A record with no time (a corrupt one) has a null date: Hive's default
        # partition, read back as null. It was `date=unknown`, which made `date` a
        # string column and matched every `date >= '...'` filter.
        dated = frame.withColumn("date", F.date_format(moment, "yyyy-MM-dd")).cache()
        written[name] = dated.count()
        if written[name]:
            dated.write.mode(mode).partitionBy("date", "group").parquet(f"{out_dir}/{name}")
        else:  # the partition values Spark infers from date=YYYY-MM-DD: a date
            empty = dated.withColumn("date", F.col("date").cast("date")).coalesce(1)
            empty.write.mode(mode).parquet(f"{out_dir}/{name}")
        dated.unpersist()
    live_pcj.unpersist()
    return written


def read_live_first(pcj):
    """The live PCJ `pcj`, cached and read now: its scan's snapshot is fixed (at
    planning, `mrs.audit.scan.plan`) before the PCJ archive is looked at.

    Why: the export and a cluster master's report looked at the archive's files first
    and Spark planned the live scan later; a `mrs pcj archive` run in between (the
    server's automatic one) moved records into a file the look had missed and out of
    the live PCJ: they were in neither, and the export or report was short of them,
    unsaid. Read in this order (as `mrs.audit.load.read_journals` reads), a record
    moved meanwhile is in the live rows, and one in both is counted once."""
    pcj = pcj.cache()
    pcj.count()
    return pcj
