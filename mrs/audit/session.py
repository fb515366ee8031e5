"""A SparkSession for the audit: workers on this interpreter, reader code shipped.

Why: `mrs audit` must work from an unactivated virtualenv, so Spark's Python
workers are pointed at `sys.executable` (PYSPARK_PYTHON / spark.pyspark.python)
unless the operator set them. On a cluster the executors do not have this checkout,
so the `mrs` and `journals` packages are zipped and shipped with `addPyFile`, the
way Spark ships any job's Python code; the executors need only pyspark, pyarrow,
lmdb and msgpack installed (and the journal paths readable).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import journals
import mrs
from mrs.audit.jvm_archive import JvmArchive, for_this_machine

SHIPPED_PACKAGES = (mrs, journals)


def code_zip(directory: Path) -> Path:
    """A zip of the `mrs` and `journals` packages (their .py files) in `directory`."""
    path = directory / "mrs-audit-code.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in SHIPPED_PACKAGES:
            assert package.__file__ is not None  # a regular package, not a namespace
            root = Path(package.__file__).parent
            for source in sorted(root.rglob("*.py")):
                archive.write(source, source.relative_to(root.parent).as_posix())
    return path


LOG4J2_FILE = Path(__file__).with_name("spark-log4j2.properties")
"""Spark's JVM says only errors (its log4j2 configuration): the audit's own output is
the progress line. A file of the package, named to the JVM as it is: it was written
into `$TMPDIR` by every audit, where it stayed, shared by every user of the machine
(a file another user made there first was read as it was, or could not be replaced)."""


def is_local(master: str) -> bool:
    return master.startswith("local")


SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
"""What every audit session is started with. Why each: no web UI, no console
progress bar and no Hive catalog (each costs start time and writes `metastore_db/`
or `spark-warehouse/` into the current directory); Arrow between Python and the JVM
(the journal is handed to Spark as one Arrow table, `mrs.audit.load`)."""
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""A short-lived local job: the C1 compiler alone warms up sooner, and the serial
collector starts no GC threads on a machine with few cores (benchmarks/README.md)."""


def local_archive() -> JvmArchive | None:
    """The class archive of the local driver JVM (mrs.audit.jvm_archive), or None."""
    import pyspark

    return for_this_machine(Path(pyspark.__file__).parent)


def build_local_archive() -> bool:
    """After a local audit's Spark has stopped: build the class archive in the
    background if this run made the list it needs (True if a build started)."""
    archive = local_archive()
    return archive is not None and archive.build_in_background(JVM_OPTIONS)


def build_session(master: str = "local[2]", app_name: str = "mrs audit", conf=None,
                  log_path: Path | None = None):  # fmt: skip
    """Start (or get) a SparkSession on `master` with the mrs formats registered.

    `log_path`: the JVM's own stderr (its banner, its log lines, the Python workers'
    tracebacks) goes to this file instead of the terminal."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from mrs.audit import register

    for name in ("py4j", "matplotlib"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    java_options = f"-Dlog4j2.configurationFile={LOG4J2_FILE.as_uri()}"  # no spaces
    archive = local_archive() if is_local(master) else None
    if is_local(master):
        java_options += f" {JVM_OPTIONS}"
    if archive is not None:
        java_options += f" {archive.java_options()}"
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {
        **SESSION_CONF,
        "spark.driver.extraJavaOptions": java_options,
        "spark.sql.shuffle.partitions": "2" if is_local(master) else "8",
        # Adaptive execution re-plans each job after its shuffle: on one machine with
        # two partitions that costs more CPU than it saves (1.4 of 6 CPU-s, 10k rows).
        "spark.sql.adaptive.enabled": "false" if is_local(master) else "true",
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        "spark.driver.host": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _stderr_to(log_path):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if archive is not None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # the session just started: its gateway is open
        archive.note_classpath(str(jvm.System.getProperty("java.class.path")))
    if not is_local(master):
        ship_code(spark)
    register(spark)
    return spark


@contextlib.contextmanager
def _stderr_to(log_path: Path | None):
    """File descriptor 2 points at `log_path` while the JVM starts, so the JVM (and
    every process it starts) keeps that file as its stderr; ours is put back after."""
    if log_path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log_fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)


_SHIPPED: list[Path] = []
"""The temporary directories of the code zips this process shipped."""


def ship_code(spark) -> Path:
    """Zip and addPyFile the reader's code so executors can import it. The driver
    serves the file to executors until its session stops; `remove_shipped_code`
    removes it then (and at exit): every cluster audit left ~740 KB in /tmp."""
    directory = Path(tempfile.mkdtemp(prefix="mrs-audit-"))
    if not _SHIPPED:
        atexit.register(remove_shipped_code)
    _SHIPPED.append(directory)
    path = code_zip(directory)
    spark.sparkContext.addPyFile(str(path))
    return path


def remove_shipped_code() -> None:
    """Remove the code zips `ship_code` made (after their session stopped)."""
    while _SHIPPED:
        shutil.rmtree(_SHIPPED.pop(), ignore_errors=True)
