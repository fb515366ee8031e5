"""The Spark audit as an auditor reads it: a PCJ partly archived by a run killed
between its files and its deletes, a corrupt record among sound ones, the report's
times on a machine whose zone is not UTC, and `mrs audit` over a real two-group bus
checked against `mrs dump` of the same journals.

Real LMDB journals, the real `mrs` command in child processes, real `mrs serve`
groups (tests/audit_fixtures.py `loss_journal`) and the test session's one local
Spark session (`spark`).
"""

from __future__ import annotations

import collections
import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import mrs.audit.session
from journals import Journal, seq_key
from mrs.audit.report import compute, export
from tests.audit_fixtures import loss_journal, spark  # noqa: F401 - fixtures
from tests.cli_helpers import run_mrs
from tests.journal_helpers import HOUR_NS, T0_NS, record, write_raw, write_records
from tests.test_operator_times_25 import local_zone

pytestmark = pytest.mark.xdist_group("spark")
"""One worker for every test that may use the test session's Spark session."""

GROUP_1_SEQ = 1 << 49
CONFIRMED = 6
ARCHIVE_UNTIL = "2023-11-15T00:30:00Z"
"""Archives the first three of the six (confirmed an hour apart from T0)."""


def _utc(ns: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ns // 1000 / 1e6, datetime.UTC)


def _iso(moment: datetime.datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture
def cluster_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """`compute` as on a cluster master: the executors read the live PCJ and DLJ
    through the formats and the driver adds the DQF, SAF and the PCJ archive."""
    monkeypatch.setattr(mrs.audit.session, "is_local", lambda _master: False)


def _archived_and_live(data_dir: Path) -> None:
    """Six confirmed messages; `mrs pcj archive` killed after its files are durable
    and before its deletes: the first three are in the archive AND the live PCJ."""
    items = [record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=T0_NS + i * HOUR_NS,
                    correlation_id=b"ARC-%d" % i) for i in range(CONFIRMED)]  # fmt: skip
    write_records(data_dir / "journals", Journal.PCJ, items)
    killed = run_mrs("pcj", "archive", "--data-dir", str(data_dir), "--group", "1",
                     "--until", ARCHIVE_UNTIL,
                     env={"MRS_PCJ_ARCHIVE_KILL_AT": "written"})  # fmt: skip
    assert killed.returncode < 0, killed.stderr
    assert list((data_dir / "pcj-archive").rglob("*.parquet"))


def _assert_each_confirmed_once(report: dict) -> None:
    totals = report["totals"]
    assert (totals["confirmed"], totals["duplicates"], totals["missing"]) == (CONFIRMED, 0, 0)
    assert totals["correlation_duplicate_confirms"] == 0
    assert report["per_queue"] == [{"target": "1.10", "messages": CONFIRMED}]
    assert [r["messages"] for r in report["latency"]] == [CONFIRMED]
    assert report["reconciliation_queue"] == [
        {"target": "1.10", "stored": CONFIRMED, "confirmed": CONFIRMED, "dead_lettered": 0,
         "in_dqf": 0, "in_saf": 0, "missing": 0, "duplicates": 0}
    ]  # fmt: skip


@pytest.mark.parametrize("master", ["local", "cluster"])
def test_a_record_both_archived_and_live_is_confirmed_once(
    spark, tmp_path: Path, request: pytest.FixtureRequest, master: str  # noqa: F811
) -> None:
    """Before: the report read the archive's rows beside the live PCJ's, so an archive
    run stopped before its deletes made its records confirmed twice (9 of 6), each a
    "duplicate" held in `pcj:1, pcj:1` and a correlation id confirmed twice, while
    the export of the same journals had each once. Now the report counts each once,
    on a local master and on a cluster's path alike, before and after the next run
    finishes the deletes."""
    if master == "cluster":
        request.getfixturevalue("cluster_path")
    data_dir = tmp_path / "g1"
    _archived_and_live(data_dir)
    sources = {"paths": json.dumps([str(data_dir)])}
    _assert_each_confirmed_once(compute(spark, sources).as_json())
    assert export(spark, sources, str(tmp_path / "parquet"))["pcj"] == CONFIRMED
    finished = run_mrs("pcj", "archive", "--data-dir", str(data_dir), "--group", "1",
                       "--until", ARCHIVE_UNTIL, "--json")  # fmt: skip
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["pcj_remaining"] == CONFIRMED - 3
    _assert_each_confirmed_once(compute(spark, sources).as_json())


def test_a_corrupt_record_holds_its_seq_and_is_counted_once(spark, tmp_path: Path) -> None:  # noqa: F811
    """Before: a corrupt PCJ record between two sound ones of its sender was also a
    gap, its counter "missing" and charged to the sender, though its journal holds
    the seq and the docs say a corrupt record is counted nowhere but
    `corrupt_records`. A counter no journal holds is still missing."""
    journals = tmp_path / "g1" / "journals"
    write_records(journals, Journal.PCJ, [record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=T0_NS)
                                          for i in (0, 1, 3, 5)])  # fmt: skip
    write_raw(journals, Journal.PCJ, seq_key(GROUP_1_SEQ + 2), b"\x00junk")
    report = compute(spark, {"paths": json.dumps([str(journals)])}).as_json()
    totals = report["totals"]
    assert (totals["confirmed"], totals["corrupt_records"]) == (4, 1)
    assert (totals["missing"], totals["gaps"], totals["duplicates"]) == (1, 1, 0)
    assert report["gaps"] == [{"after_seq": GROUP_1_SEQ + 3, "before_seq": GROUP_1_SEQ + 5,
                               "missing": 1, "sender": "1.13", "queue": "1.10"}]  # fmt: skip


@pytest.fixture
def local_zone_not_utc() -> Iterator[None]:
    """This process's local time zone is St John's (UTC-03:30, not a whole hour)."""
    with local_zone("America/St_Johns"):
        yield


def test_report_times_are_utc_whatever_the_local_zone(
    spark, tmp_path: Path, local_zone_not_utc: None  # noqa: F811
) -> None:
    """Before: Spark hands Python a timestamp as a naive datetime in the local zone,
    which the report labelled UTC: on a machine in St John's, `first_confirm` read
    3:30 early and `per_hour` had hours such as 18:30Z. Now they are the journal's."""
    journals = tmp_path / "g1" / "journals"
    confirmed_ns = [T0_NS + i * HOUR_NS // 2 for i in range(5)]
    write_records(journals, Journal.PCJ, [record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=at)
                                          for i, at in enumerate(confirmed_ns)])  # fmt: skip
    report = compute(spark, {"paths": json.dumps([str(journals)])}).as_json()
    assert report["totals"]["first_confirm"] == _iso(_utc(confirmed_ns[0]))
    assert report["totals"]["last_confirm"] == _iso(_utc(confirmed_ns[-1]))
    hours = collections.Counter(
        _iso(_utc(at).replace(minute=0, second=0, microsecond=0)) for at in confirmed_ns
    )
    assert {r["hour"]: r["messages"] for r in report["per_hour"]} == dict(hours)


def _dumped(config: Path, journal: str) -> list[dict]:
    rows = []
    for group in (1, 2):
        dumped = run_mrs("dump", journal, "--config", str(config), "--group", str(group),
                         "--json")  # fmt: skip
        assert dumped.returncode == 0, dumped.stderr
        rows += [json.loads(line) for line in dumped.stdout.splitlines() if line.strip()]
    return rows


def test_mrs_audit_of_a_real_bus_agrees_with_mrs_dump_in_any_zone(loss_journal) -> None:  # noqa: F811
    """`mrs audit --json` over two real groups (confirmed, dead letters, a SAF waiting
    for the link, a DQF record deleted on purpose), run in a zone that is not UTC
    with a naive `--since` (local time): every count and time equals `mrs dump`'s."""
    config = loss_journal.config
    pcj, dlj, dqf, saf = (_dumped(config, j) for j in ("pcj", "dlj", "dqf", "saf"))
    audited = run_mrs("audit", "--config", str(config), "--json", "--quiet",
                      "--since", "2000-01-01T00:00:00", timeout_s=600,
                      env={"TZ": "America/St_Johns"})  # fmt: skip
    assert audited.returncode == 0, audited.stderr
    report = json.loads(audited.stdout)
    totals = report["totals"]
    assert (totals["confirmed"], totals["dead_letters"]) == (len(pcj), len(dlj))
    assert (totals["in_dqf"], totals["in_saf"], totals["missing"]) == (len(dqf), len(saf), 1)
    assert totals["duplicates"] == 0
    assert {r["target"]: r["messages"] for r in report["per_queue"]} == dict(
        collections.Counter(r["target"] for r in pcj)
    )
    assert totals["first_confirm"] == _iso(_utc(min(r["confirm_time_ns"] for r in pcj)))
    hours = collections.Counter(
        _iso(_utc(r["confirm_time_ns"]).replace(minute=0, second=0, microsecond=0))
        for r in pcj
    )
    assert {r["hour"]: r["messages"] for r in report["per_hour"]} == dict(hours)
    latency = sorted((r["confirm_time_ns"] // 1000 - r["put_time_ns"] // 1000) / 1000.0
                     for r in pcj)  # fmt: skip
    [row] = report["latency"]
    assert row["max_ms"] == pytest.approx(latency[-1]) and row["max_ms"] < 60_000
