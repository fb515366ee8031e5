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

TABLES = ("per_queue", "per_sender", "per_hour", "cross_group", "latency", "dead_letters")


@dataclass
class Report:
    totals: dict
    tables: dict[str, list[dict]] = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"totals": _plain(self.totals), **{k: _plain(v) for k, v in self.tables.items()}}


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
    from pyspark.sql import functions as F

    if since is not None:
        frame = frame.where(F.col(column) >= F.lit(since))
    if until is not None:
        frame = frame.where(F.col(column) < F.lit(until))
    return frame


def journals(spark, sources: dict[str, str], since=None, until=None):
    """(pcj, dlj) DataFrames over the sources, time-bounded, corrupt rows included."""
    pcj = _bounded(_reader(spark, "mrs-pcj", sources), "confirm_time", since, until)
    dlj = _bounded(_reader(spark, "mrs-dlj", sources), "written_time", since, until)
    return pcj, dlj


def _rows(frame) -> list[dict]:
    return [row.asDict() for row in frame.collect()]


def compute(spark, sources: dict[str, str], since=None, until=None) -> Report:
    """Every figure of the report (see module doc)."""
    from pyspark.sql import functions as F

    pcj_all, dlj_all = journals(spark, sources, since, until)
    pcj_all = pcj_all.drop("body").cache()
    dlj_all = dlj_all.drop("body").cache()
    pcj = pcj_all.where(F.col("corrupt").isNull())
    dlj = dlj_all.where(F.col("corrupt").isNull())
    corrupt = (
        pcj_all.where(F.col("corrupt").isNotNull()).count()
        + dlj_all.where(F.col("corrupt").isNotNull()).count()
    )
    totals = _totals(pcj, dlj, corrupt)
    tables = _tables(pcj, dlj)
    pcj_all.unpersist()
    dlj_all.unpersist()
    return Report(totals, tables)


def _totals(pcj, dlj, corrupt: int) -> dict:
    """The `totals` figure: one aggregation over the sound PCJ rows, plus counts."""
    from pyspark.sql import functions as F

    summary = pcj.agg(
        F.count(F.lit(1)).alias("confirmed"),
        F.sum(F.col("possdupl").cast("long")).alias("possdupl"),
        F.count("replayed_from").alias("replayed"),
        F.min("confirm_time").alias("first_confirm"),
        F.max("confirm_time").alias("last_confirm"),
        F.sum("body_size").alias("body_bytes"),
    ).collect()[0]
    confirmed = summary["confirmed"]
    return {
        "confirmed": confirmed,
        "dead_letters": dlj.count(),
        "possdupl": summary["possdupl"] or 0,
        "possdupl_rate": (summary["possdupl"] or 0) / confirmed if confirmed else 0.0,
        "replayed": summary["replayed"],
        "corrupt_records": corrupt,
        "body_bytes": summary["body_bytes"] or 0,
        "first_confirm": summary["first_confirm"],
        "last_confirm": summary["last_confirm"],
    }


def _tables(pcj, dlj) -> dict[str, list[dict]]:
    """The small tables (TABLES), each collected to the driver."""
    from pyspark.sql import functions as F

    latency_ms = (
        F.unix_micros("confirm_time") - F.unix_micros("put_time")
    ).cast("double") / 1000.0
    return {
        "per_queue": _rows(
            pcj.groupBy("target").agg(F.count(F.lit(1)).alias("messages")).orderBy("target")
        ),
        "per_sender": _rows(
            pcj.groupBy("source").agg(F.count(F.lit(1)).alias("messages")).orderBy("source")
        ),
        "per_hour": _rows(
            pcj.groupBy(F.date_trunc("hour", "confirm_time").alias("hour"))
            .agg(F.count(F.lit(1)).alias("messages"))
            .orderBy("hour")
        ),
        "cross_group": _rows(
            pcj.groupBy("source_group", "target_group")
            .agg(F.count(F.lit(1)).alias("messages"))
            .orderBy("source_group", "target_group")
        ),
        "latency": _rows(
            pcj.withColumn("latency_ms", latency_ms)
            .groupBy("target")
            .agg(
                F.count(F.lit(1)).alias("messages"),
                F.percentile("latency_ms", F.lit(0.5)).alias("p50_ms"),
                F.percentile("latency_ms", F.lit(0.95)).alias("p95_ms"),
                F.percentile("latency_ms", F.lit(0.99)).alias("p99_ms"),
                F.max("latency_ms").alias("max_ms"),
            )
            .orderBy("target")
        ),
        "dead_letters": _rows(
            dlj.groupBy("dead_letter_reason")
            .agg(F.count(F.lit(1)).alias("messages"))
            .orderBy(F.desc("messages"), "dead_letter_reason")
        ),
    }


def export(spark, sources: dict[str, str], out_dir: str, since=None, until=None,
           mode: str = "errorifexists") -> dict[str, int]:  # fmt: skip
    """Both journals to Parquet under out_dir/{pcj,dlj}, partitioned by date and group
    (the layout `mrs.audit.parquet` writes); rows written per journal."""
    from pyspark.sql import functions as F

    pcj, dlj = journals(spark, sources, since, until)
    written = {}
    for name, frame in (("pcj", pcj), ("dlj", dlj)):
        moment = F.coalesce("confirm_time", "written_time", "put_time")
        dated = frame.withColumn(
            "date", F.coalesce(F.date_format(moment, "yyyy-MM-dd"), F.lit("unknown"))
        ).cache()
        dated.write.mode(mode).partitionBy("date", "group").parquet(f"{out_dir}/{name}")
        written[name] = dated.count()
        dated.unpersist()
    return written
