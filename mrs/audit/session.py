"""A SparkSession for the audit: workers on this interpreter, reader code shipped.

Why: `mrs audit` must work from an unactivated virtualenv, so Spark's Python
workers are pointed at `sys.executable` (PYSPARK_PYTHON / spark.pyspark.python)
unless the operator set them. On a cluster the executors do not have this checkout,
so the `mrs` and `journals` packages are zipped and shipped with `addPyFile`, the
way Spark ships any job's Python code; the executors need only pyspark, pyarrow,
lmdb and msgpack installed (and the journal paths readable).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import zipfile
from pathlib import Path

import journals
import mrs

SHIPPED_PACKAGES = (mrs, journals)


def code_zip(directory: Path) -> Path:
    """A zip of the `mrs` and `journals` packages (their .py files) in `directory`."""
    path = directory / "mrs-audit-code.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in SHIPPED_PACKAGES:
            root = Path(package.__file__).parent
            for source in sorted(root.rglob("*.py")):
                archive.write(source, source.relative_to(root.parent).as_posix())
    return path


LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark %p %c{1}: %m%n
"""
"""Spark's JVM says only errors: the audit's own output is the progress line."""


def _log4j2_file() -> Path:
    path = Path(tempfile.gettempdir()) / "mrs-audit-log4j2.properties"
    if not path.exists() or path.read_text() != LOG4J2_PROPERTIES:
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(LOG4J2_PROPERTIES)
        os.replace(scratch, path)
    return path


def is_local(master: str) -> bool:
    return master.startswith("local")


def build_session(master: str = "local[*]", app_name: str = "mrs audit", conf=None):
    """Start (or get) a SparkSession on `master` with the mrs formats registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from mrs.audit import register

    for name in ("py4j", "matplotlib"):
        logging.getLogger(name).setLevel(logging.WARNING)
    java_options = f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.driver.host", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not is_local(master):
        ship_code(spark)
    register(spark)
    return spark


def ship_code(spark) -> Path:
    """Zip and addPyFile the reader's code so executors can import it."""
    directory = Path(tempfile.mkdtemp(prefix="mrs-audit-"))
    path = code_zip(directory)
    spark.sparkContext.addPyFile(str(path))
    return path
