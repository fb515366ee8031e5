"""The audit answers "was anything lost?" on journals made by real servers.

The loss bus (tests/audit_fixtures.py) puts messages that end in every place (PCJ,
DQF, DLJ, group 1's SAF behind a cut link), then one DQF record is deleted with the
journals library: the reconciliation must equal a direct count over the LMDB files
and report exactly that message as missing. One Spark session serves the module.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from journals import CorruptRecord, Journal, JournalStore, WriteBatch, seq_key
from mrs.audit.load import queue_names, read_journals
from mrs.audit.output import write_html, write_json, write_tables
from mrs.audit.reconcile import trail
from mrs.audit.report import compute
from tests.audit_fixtures import (  # noqa: F401 - fixtures
    LOSS_CONFIRMED,
    LOSS_DEAD,
    LOSS_DELETED,
    LOSS_ORDERS,
    LOSS_SAF,
    loss_journal,
    spark,
)
from tests.cli_helpers import run_mrs

pytestmark = pytest.mark.xdist_group("spark")
ROOT = Path(__file__).resolve().parents[2]
PLACES = {"pcj": "confirmed", "dlj": "dead_lettered", "dqf": "in_dqf", "saf": "in_saf"}


def _direct_reconciliation(loss, key: str) -> dict[str, dict[str, int]]:
    """Per sender or queue, records of each journal counted straight from LMDB."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for journal in (Journal.PCJ, Journal.DLJ, Journal.DQF, Journal.SAF):
        for _, record in loss.records(journal):
            assert not isinstance(record, CorruptRecord)
            group, queue = ((record.source_group, record.source_queue) if key == "source"
                            else (record.target_group, record.target_queue))  # fmt: skip
            counts[f"{group}.{queue}"][PLACES[journal.value]] += 1
    return {name: dict(counter) for name, counter in counts.items()}


@pytest.fixture(scope="module")
def report(spark, loss_journal):  # noqa: F811
    return compute(spark, loss_journal.sources(), names=queue_names(str(loss_journal.config)))


def test_reconciliation_equals_a_direct_count_and_finds_the_deleted_record(report, loss_journal):  # noqa: F811
    tables = report.as_json()
    for key, table in (("source", "reconciliation_sender"), ("target", "reconciliation_queue")):
        direct = _direct_reconciliation(loss_journal, key)
        for row in tables[table]:
            counted = {p: row[p] for p in PLACES.values() if row[p]}
            assert counted == direct.get(row[key], {}), (key, row)
        assert {r[key] for r in tables[table]} == set(direct)
    (sender,) = tables["reconciliation_sender"]
    stored = LOSS_ORDERS + LOSS_DEAD + LOSS_SAF  # every put its client saw stored
    assert sender == {
        "source": "1.13", "source_name": "1.SENDER", "stored": stored,
        "confirmed": LOSS_CONFIRMED, "dead_lettered": LOSS_DEAD,
        "in_dqf": LOSS_ORDERS - LOSS_CONFIRMED - 1, "in_saf": LOSS_SAF,
        "missing": 1, "duplicates": 0,
    }  # fmt: skip
    orders = next(r for r in tables["reconciliation_queue"] if r["target"] == "1.10")
    assert (orders["target_name"], orders["stored"], orders["missing"]) == ("1.ORDERS", 12, 1)
    assert [(g["after_seq"], g["before_seq"], g["missing"]) for g in tables["gaps"]] == [
        (loss_journal.deleted_seq - 1, loss_journal.deleted_seq + 1, 1)
    ]
    assert tables["totals"]["missing"] == 1 and tables["totals"]["duplicates"] == 0
    # The test bus journals its confirms with FORCE_JRN only: the report says so.
    assert [n.split(" has ")[0] for n in tables["notes"]] == ["group 1", "group 2"]


def test_correlation_ids_show_the_missing_number(report):
    rows = {r["prefix"]: r for r in report.as_json()["correlation"]}
    assert rows["ord-"]["missing_numbers"] == 1
    assert rows["ord-"]["first_number"] == 0 and rows["ord-"]["last_number"] == LOSS_ORDERS - 1
    assert rows["ord-"]["duplicate_confirms"] == 0
    assert report.totals["correlation_missing_numbers"] == 1


def test_a_message_in_two_places_is_a_duplicate(spark, loss_journal, tmp_path):  # noqa: F811
    """A copy of a confirmed message written into group 2's DQF as well."""
    for group in (1, 2):
        shutil.copytree(loss_journal.bus.data_dir(group), tmp_path / f"g{group}")
    confirmed = next(r for _, r in loss_journal.records(Journal.PCJ))
    store = JournalStore(tmp_path / "g2" / "journals")
    try:
        store.commit_now(WriteBatch.empty().put_record(Journal.DLJ, seq_key(confirmed.seq),
                                                       confirmed))  # fmt: skip
    finally:
        store.close()
    sources = {"paths": json.dumps([str(tmp_path / "g1"), str(tmp_path / "g2")])}
    found = compute(spark, sources).as_json()
    assert [(d["seq"], d["places"]) for d in found["duplicates"]] == [
        (confirmed.seq, "dlj:2, pcj:1")
    ]
    assert found["totals"]["duplicates"] == 1
    sender = found["reconciliation_sender"][0]
    assert (sender["stored"], sender["duplicates"]) == (LOSS_ORDERS + LOSS_DEAD + LOSS_SAF, 1)


def test_trail_of_a_confirmed_a_waiting_and_a_lost_message(loss_journal):  # noqa: F811
    table = read_journals(loss_journal.sources())
    confirmed = [e["event"] for e in trail(table, b"ord-0002")]
    assert confirmed == ["put", "delivered", "confirm"]
    waiting = trail(table, b"ord-0010")
    assert [e["event"] for e in waiting] == ["put", "stored in DQF"]
    assert [e["event"] for e in trail(table, b"saf-1")] == ["put", "stored in SAF"]
    assert [e["event"] for e in trail(table, b"dead-0")] == ["put", "dead letter"]
    assert trail(table, f"ord-{LOSS_DELETED:04d}".encode()) == []
    shown = run_mrs("audit", "--config", str(loss_journal.config), "--trail", "ord-0002")
    assert shown.returncode == 0, shown.stderr
    assert "put by 1.SENDER to 1.ORDERS" in shown.stdout and "confirm" in shown.stdout
    lost = run_mrs("audit", "--config", str(loss_journal.config), "--trail", "ord-0008")
    assert lost.returncode == 1 and "no record of correlation id 'ord-0008'" in lost.stderr
    # Data directories (e.g. copies) read, names still from the config:
    dirs = [a for g in (1, 2) for a in ("--data-dir", str(loss_journal.bus.data_dir(g)))]
    named = run_mrs("audit", *dirs, "--config", str(loss_journal.config), "--trail", "saf-1",
                    "--json")  # fmt: skip
    assert named.returncode == 0, named.stderr
    events = json.loads(named.stdout)["events"]
    assert "put by 1.SENDER to 2.TRADES" in events[0]["detail"]


def test_report_files_carry_names_and_the_new_sections(report, tmp_path):
    write_tables(report, tmp_path)
    write_json(report, tmp_path / "report.json")
    page = write_html(report, tmp_path / "report.html", "t", "d").read_text()
    assert "1.ORDERS" in page and "reconciliation queue" in page and "gaps" in page
    for name in ("reconciliation_queue", "reconciliation_sender", "gaps", "correlation"):
        assert (tmp_path / "tables" / f"{name}.parquet").is_file()


def test_cli_json_writes_nothing_names_queues_and_keeps_spark_quiet(loss_journal, tmp_path):  # noqa: F811
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    (tmp_path / "cwd").mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "audit", "--config", str(loss_journal.config), "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path / "cwd", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["html"] is None and report["totals"]["missing"] == 1
    assert {r["target_name"] for r in report["per_queue"]} == {"1.ORDERS"}
    assert list((tmp_path / "cwd").iterdir()) == []  # no ./mrs-audit, no spark-warehouse
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.endswith(".log")] == []
    lines = result.stderr.splitlines()
    assert all(line.startswith("mrs audit: ") for line in lines), result.stderr
    assert any("read PCJ" in line for line in lines) and lines[-1].endswith("done")


@pytest.mark.parametrize("stage", ["read PCJ", "counting per queue"])
def test_ctrl_c_exits_130_with_one_line(loss_journal, tmp_path, stage):  # noqa: F811
    """Interrupted while the JVM starts, and while a Spark job runs."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mrs", "audit", "--config", str(loss_journal.config),
         "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen = []
    for line in process.stderr:  # wait until the audit reaches the stage
        seen.append(line)
        if stage in line:
            break
    process.send_signal(signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 130
    assert rest.strip() == "mrs audit: interrupted", "".join(seen) + rest
    assert not (tmp_path / "out" / "report.html").exists()
