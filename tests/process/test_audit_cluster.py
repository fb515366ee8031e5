"""`mrs audit --master spark://...` on a real standalone cluster (one master, one
worker, started with pyspark's own launcher on 127.0.0.1) gives the same numbers as
local mode, and its executors run the reader from the code the job ships.

The executors run a Python that cannot import this checkout (`-S`: no .pth files,
so no editable install): the only way they can read the journal is the zip that
`mrs audit` ships with addPyFile.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pyspark
import pytest

from mrs.audit.report import compute
from tests.audit_fixtures import (  # noqa: F401 - fixtures
    audit_journal,
    report_figures,
    spark,
)

START_S = 180.0
JOB_S = 600.0
pytestmark = pytest.mark.xdist_group("spark")  # the session's one local Spark and cluster
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


class Daemon:
    """A Spark daemon process whose output is watched for a line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [str(SPARK_CLASS), *args], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.seen = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self.seen:
                self.lines.append(line)
                self.seen.notify_all()

    def wait_for(self, pattern: str, timeout_s: float = START_S) -> re.Match:
        deadline = time.monotonic() + timeout_s
        with self.seen:
            while True:
                for line in self.lines:
                    if match := re.search(pattern, line):
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise AssertionError(f"never saw {pattern!r}:\n{''.join(self.lines[-30:])}")
                self.seen.wait(min(left, 1.0))

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _python_without_checkout(directory: Path) -> Path:
    """An interpreter that has pyspark, pyarrow, lmdb, msgpack but not `mrs`."""
    site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    wrapper = directory / "python-without-mrs"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" -S "$@"\n'
    )
    wrapper.chmod(0o755)
    probe = subprocess.run([str(wrapper), "-c", "import mrs"], cwd=directory,
                           capture_output=True, text=True)  # fmt: skip
    assert probe.returncode != 0, "the wrapper must not see the checkout"
    return wrapper


def test_standalone_cluster_gives_the_same_report_as_local_mode(
    spark, audit_journal, cluster, tmp_path  # noqa: F811 - cluster: tests/process/conftest.py
):
    url, work = cluster
    local = compute(spark, audit_journal.sources()).as_json()
    out = tmp_path / "report"
    env = {**os.environ, "PYSPARK_PYTHON": str(_python_without_checkout(tmp_path))}
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "audit", "--master", url, "--config",
         str(audit_journal.config), "--group", "1,2", "--out", str(out), "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=JOB_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    remote = json.loads(result.stdout)
    assert report_figures(remote) == report_figures(local)
    assert remote["totals"]["confirmed"] == len(audit_journal.confirmed_statuses)
    # The work ran on the worker's executor, with the shipped code:
    shipped = list(work.rglob("mrs-audit-code.zip"))
    assert shipped, "the executor never received the reader code"
    # And the files a person opens or a script loads:
    page = (out / "report.html").read_text()
    charted = ("per_queue", "per_sender", "per_hour", "dead_letters")  # a chart from 2 bars
    charts = sum(len(local[name]) >= 2 for name in charted) + bool(local["latency"])
    assert page.count("data:image/png;base64,") == charts >= 3 and "<script" not in page
    as_text = pacsv.ConvertOptions(column_types={"target": pa.string()})  # "1.10" is no float
    per_queue = pacsv.read_csv(out / "tables" / "per_queue.csv", convert_options=as_text)
    per_queue = per_queue.to_pylist()
    assert {r["target"]: r["messages"] for r in per_queue} == report_figures(local)["per_queue"]
    assert pq.read_table(out / "tables" / "latency.parquet").num_rows == len(local["latency"])
