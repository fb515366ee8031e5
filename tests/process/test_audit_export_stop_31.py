"""A stop (SIGTERM, Ctrl-C, `timeout`) of `mrs audit export` while Spark writes leaves
--out as it was: the export is written beside it and moved in whole, as `mrs audit
--out` leaves its report (tests/process/test_audit_probes_30.py).

Real LMDB journals; `mrs audit export` in a child process stopped by a real SIGTERM;
the one local Spark session of the test session for the exports run in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from journals import Journal
from mrs.audit import command
from mrs.audit.report import export
from tests.audit_fixtures import spark  # noqa: F401 - fixture
from tests.journal_helpers import record, write_records

pytestmark = pytest.mark.xdist_group("spark")
"""One worker for every test that may use the test session's Spark session."""

STOP_BETWEEN_THE_JOURNALS = """
import os, signal, sys
from pyspark.sql.classic.dataframe import DataFrame
from mrs.tools.entry import main

unpersist = DataFrame.unpersist

def stopped_after_the_pcj(frame, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # the PCJ is written, the DLJ not yet
    return unpersist(frame, *args, **kwargs)

DataFrame.unpersist = stopped_after_the_pcj
sys.argv = ["mrs", "audit", "export", "--data-dir", sys.argv[1], "--out", sys.argv[2],
            "--overwrite", "--quiet"]
sys.exit(main())
"""


def _group(directory: Path, count: int) -> tuple[Path, list[int]]:
    """A data directory with `count` confirmed messages in its live PCJ."""
    records = [record(index) for index in range(count)]
    write_records(directory / "journals", Journal.PCJ, records)
    return directory, sorted(r.seq for r in records)


def _exported_seqs(out: Path) -> list[int]:
    return sorted(ds.dataset(out / "pcj", partitioning="hive").to_table().column("seq").to_pylist())


def test_a_stopped_export_leaves_the_previous_one_whole_and_the_next_replaces_it(
    spark,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Before: Spark wrote into --out itself, the PCJ then the DLJ, so a stop in
    between left the new run's `pcj/` beside the previous run's `dlj/`."""
    old_dir, old_seqs = _group(tmp_path / "old", 2)
    new_dir, new_seqs = _group(tmp_path / "new", 5)
    out = tmp_path / "parquet"
    export(spark, {"paths": json.dumps([str(old_dir)])}, str(out))
    before = {str(p.relative_to(out)) for p in out.rglob("*")}
    stopped = subprocess.run(
        [sys.executable, "-c", STOP_BETWEEN_THE_JOURNALS, str(new_dir), str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == "mrs audit: stopped (SIGTERM)"
    assert {str(p.relative_to(out)) for p in out.rglob("*")} - {"spark.log"} == before
    assert _exported_seqs(out) == old_seqs
    args = argparse.Namespace(out=out, json=True)
    assert command._export(spark, {"paths": json.dumps([str(new_dir)])}, args, None, None) == 0
    assert _exported_seqs(out) == new_seqs
    assert not [name for name in os.listdir(out) if name.startswith(".")]
    assert sorted(p.name for p in out.iterdir() if p.name != "spark.log") == ["dlj", "pcj"]
