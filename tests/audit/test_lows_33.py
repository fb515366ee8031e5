"""`mrs audit export` over a damaged journal with a time window (session 33).

Real LMDB journals and the test session's one local Spark session (`spark`).
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from journals import Journal, seq_key
from mrs.audit.report import export
from sim.processes import write_single_group_config
from tests.audit_fixtures import spark  # noqa: F401 - fixture
from tests.journal_helpers import T0_NS, record, write_raw, write_records

pytestmark = pytest.mark.xdist_group("spark")
"""One worker for every test that may use the test session's Spark session."""

GROUP_1_SEQ = 1 << 49


def test_a_windowed_export_keeps_the_corrupt_records(
    spark,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Before: `mrs audit export --since ...` wrote no corrupt PCJ or DLJ record (its
    time is unreadable, so every window's filter dropped it), while the export
    without a window and the report (`corrupt_records`) keep them: an auditor's
    monthly export of a damaged journal showed no damage."""
    config = write_single_group_config(tmp_path)
    journals = tmp_path / "g1" / "journals"
    sound = [record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=T0_NS) for i in (0, 1, 3)]
    write_records(journals, Journal.PCJ, sound)
    write_raw(journals, Journal.PCJ, seq_key(GROUP_1_SEQ + 2), b"\x00junk")
    write_raw(journals, Journal.DLJ, seq_key(GROUP_1_SEQ + 4), b"\x00junk")
    sources = {"config": str(config), "groups": "1"}
    since = datetime.datetime.fromtimestamp(T0_NS / 1e9 - 3600, datetime.UTC)
    windowed = export(spark, sources, str(tmp_path / "month"), since, mode="overwrite")
    whole = export(spark, sources, str(tmp_path / "all"), mode="overwrite")
    assert windowed == whole == {"pcj": 4, "dlj": 1}, (windowed, whole)
