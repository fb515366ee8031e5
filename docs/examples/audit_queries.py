"""Query a group's PCJ and DLJ with Spark: the DataFrame API and SQL.

    python docs/examples/audit_queries.py DATA_DIR [DATA_DIR ...]

DATA_DIR is a group's data_dir (the one holding `journals/`), e.g. the `g1` and
`g2` of a `mrs demo --scratch DIR` run. Prints a few figures; see docs/audit.md.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from mrs.audit import register


def main(spark: SparkSession, data_dirs: list[str]) -> None:
    register(spark)  # formats mrs-pcj and mrs-dlj

    # DataFrame API: confirmed messages per target queue, and the slowest confirms.
    pcj = spark.read.format("mrs-pcj").load(data_dirs)
    per_queue = pcj.groupBy("target").count().orderBy("target").collect()
    for row in per_queue:
        print(f"queue {row['target']}: {row['count']} confirmed")
    latency_ms = (F.unix_micros("confirm_time") - F.unix_micros("put_time")) / 1000
    slowest = pcj.select("seq", "target", latency_ms.alias("ms")).orderBy(F.desc("ms")).first()
    if slowest is not None:
        print(f"slowest confirm: seq {slowest['seq']} on {slowest['target']}: {slowest['ms']} ms")

    # SQL: the same journal as a view; seq and time bounds are pushed into the scan.
    pcj.createOrReplaceTempView("pcj")
    [row] = spark.sql(
        "SELECT count(*) AS messages, sum(CAST(possdupl AS INT)) AS possdupl "
        "FROM pcj WHERE confirm_time >= timestamp'2000-01-01 00:00:00' AND seq > 0"
    ).collect()
    print(f"SQL: {row['messages']} confirmed, {row['possdupl']} marked POSSDUPL")

    dlj = spark.read.format("mrs-dlj").load(data_dirs)
    dlj.createOrReplaceTempView("dlj")
    for row in spark.sql(
        "SELECT dead_letter_reason, count(*) AS n FROM dlj GROUP BY 1 ORDER BY 2 DESC"
    ).collect():
        print(f"dead letters {row['dead_letter_reason']}: {row['n']}")
    print(f"corrupt records: {pcj.where('corrupt IS NOT NULL').count()}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[*]")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    try:
        main(session, sys.argv[1:])
    finally:
        session.stop()
