"""The Spark audit as an auditor runs it on a schedule: a monthly window (`--since`)
over a journal with a damaged record, a group named twice on the command line, a bus
file that names a group of another host, and the HTML page's seqs pasted into the
journal tools.

Real LMDB journals, the real `mrs` command in a child process and the test session's
one local Spark session (`spark`).
"""

from __future__ import annotations

import datetime
from pathlib import Path

from journals import Journal, seq_key
from mrs.audit.output import write_html
from mrs.audit.report import TABLES, Report, compute
from sim.processes import write_single_group_config
from tests.audit_fixtures import SPARK_SESSION, spark  # noqa: F401 - fixture
from tests.cli_helpers import run_mrs
from tests.journal_helpers import T0_NS, record, write_raw, write_records

GROUP_1_SEQ = 1 << 49
SOUND = (0, 1, 3)
"""The confirmed records' seq offsets; the PCJ record at offset 2 and the dead letter
at offset 4 are damaged."""


@SPARK_SESSION
def test_a_window_counts_damaged_records_and_a_group_named_twice_once(
    spark,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Before: with `--since` (or `--until`) a corrupt PCJ or DLJ record, whose time
    is unreadable, fell outside every window: `mrs audit --since 30d` over a damaged
    journal said 0 corrupt records. And `--group 1 --group 1,2` read group 1 twice:
    each message confirmed twice and a duplicate held in `pcj:1, pcj:1`."""
    config = write_single_group_config(tmp_path)
    journals = tmp_path / "g1" / "journals"
    write_records(journals, Journal.PCJ, [record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=T0_NS)
                                          for i in SOUND])  # fmt: skip
    write_raw(journals, Journal.PCJ, seq_key(GROUP_1_SEQ + 2), b"\x00junk")
    write_raw(journals, Journal.DLJ, seq_key(GROUP_1_SEQ + 4), b"\x00junk")
    since = datetime.datetime.fromtimestamp(T0_NS / 1e9 - 3600, datetime.UTC)
    report = compute(spark, {"config": str(config), "groups": "1,1"}, since).as_json()
    totals = report["totals"]
    assert (totals["confirmed"], totals["duplicates"]) == (len(SOUND), 0), totals
    assert totals["corrupt_records"] == 2, totals
    assert (totals["missing"], totals["dead_letters"]) == (0, 0), totals


def test_a_group_of_another_host_is_named_with_the_way_round_it(tmp_path: Path) -> None:
    """Before: a bus file naming a group whose journals are on another host made
    `mrs audit --config bus.toml` say only "no group journal (data.mdb) in
    /var/mrs/g1", naming neither the group nor `--group`."""
    config = write_single_group_config(tmp_path)  # g1 never started here: no journal
    done = run_mrs("audit", "--config", str(config), "--trail", "X", "--quiet")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("mrs audit: group 1: no group journal"), done.stderr
    assert "give --group" in done.stderr, done.stderr


def test_the_pages_seqs_paste_into_the_journal_tools(tmp_path: Path) -> None:
    """Before: report.html wrote a gap's seqs with thousands separators
    ("562,949,953,421,313"), which `mrs dump --seq` does not take, and
    `checks_truncated` as 0 or 1."""
    gap = {"after_seq": GROUP_1_SEQ + 1, "before_seq": GROUP_1_SEQ + 9, "missing": 1234,
           "sender": "1.13", "queue": None}  # fmt: skip
    tables = {**{name: [] for name in TABLES}, "gaps": [gap]}
    report = Report({"missing": 1234, "checks_truncated": False}, tables)
    page = write_html(report, tmp_path / "report.html", "MRS audit", "test").read_text()
    assert f">{GROUP_1_SEQ + 1}<" in page and f">{GROUP_1_SEQ + 9}<" in page
    assert ">1,234<" in page  # a count keeps its separators
    assert ">false<" in page
