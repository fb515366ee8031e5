"""The Spark audit's time window and sources as an auditor uses them: `--trail` with
`--since`/`--until`, an `--until` pasted from `mrs dump` (inclusive, as in every tool),
`--data-dir` with `--config` reading the group's configured PCJ archive, and the docs'
Spark example of the full PCJ history run as the page shows it.

Real LMDB journals, the real `mrs` command in child processes, `mrs pcj archive`'s
real Parquet files and the test session's one local Spark session (`spark`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from journals import Journal
from mrs.audit.command import parse_time
from mrs.audit.output import write_tables
from mrs.audit.report import TABLES, compute, export
from mrs.offline.scalars import format_time_ns
from sim.processes import write_single_group_config
from tests.audit.test_audit_25c import cluster_path  # noqa: F401 - fixture
from tests.audit_fixtures import SPARK_SESSION, spark  # noqa: F401 - fixture
from tests.cli_helpers import run_mrs
from tests.journal_helpers import HOUR_NS, T0_NS, record, write_records

GROUP_1_SEQ = 1 << 49
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _confirmed_hourly(data_dir: Path, count: int, correlation_id=None) -> list[int]:
    """`count` PCJ records of group 1 confirmed an hour apart from T0 (to the
    nanosecond: T0 + i hours + 123456789 ns); their confirm times."""
    times = [T0_NS + i * HOUR_NS + 123_456_789 for i in range(count)]
    write_records(data_dir / "journals", Journal.PCJ, [
        record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=at,
               correlation_id=correlation_id or b"ORD-%d" % i)
        for i, at in enumerate(times)
    ])  # fmt: skip
    return times


def _trail(data_dir: Path, *window: str) -> tuple[int, list[dict], str]:
    done = run_mrs("audit", "--data-dir", str(data_dir), "--trail", "ORD-1", "--json",
                   "--quiet", *window)  # fmt: skip
    events = json.loads(done.stdout)["events"] if done.stdout.strip() else []
    return done.returncode, events, done.stderr


def test_trail_holds_only_the_records_in_the_window(tmp_path: Path) -> None:
    """Before: `--trail` read every record of the id whatever `--since`/`--until`
    said, so an auditor asking what happened to ORD-1 yesterday got last month's
    confirms too. Now the trail holds the records the report counts in that window
    (a confirm in it; `--until` pasted from `mrs dump` keeps its record)."""
    data_dir = tmp_path / "g1"
    times = _confirmed_hourly(data_dir, 4, correlation_id=b"ORD-1")
    code, events, stderr = _trail(data_dir)
    assert code == 0, stderr
    assert sorted({e["seq"] for e in events}) == [GROUP_1_SEQ + i for i in range(4)]
    code, events, stderr = _trail(data_dir, "--since", format_time_ns(times[1]),
                                  "--until", format_time_ns(times[2]))  # fmt: skip
    assert code == 0, stderr
    assert sorted({e["seq"] for e in events}) == [GROUP_1_SEQ + 1, GROUP_1_SEQ + 2]
    code, events, stderr = _trail(data_dir, "--since", format_time_ns(times[3] + HOUR_NS))
    assert (code, events) == (1, [])
    assert "ORD-1' between" in stderr and "(4 records of it outside" in stderr, stderr


def _window(since_ns: int, until_ns: int):
    """--since/--until as an auditor pastes them from `mrs dump`, as the command reads them."""
    return (parse_time(format_time_ns(since_ns), "--since"),
            parse_time(format_time_ns(until_ns), "--until"))  # fmt: skip


@SPARK_SESSION
@pytest.mark.parametrize("master", ["local", "cluster"])
def test_until_pasted_from_a_record_keeps_that_record(
    spark, tmp_path: Path, request: pytest.FixtureRequest, master: str  # noqa: F811
) -> None:
    """Before: the audit's `--until` was exclusive while `mrs dump` and `mrs jplay`
    keep a record at exactly `--until`, so the confirm time `mrs dump` printed, pasted
    into `mrs audit --until`, dropped that very record from the report and the export.
    Now the three tools select the same records."""
    if master == "cluster":
        request.getfixturevalue("cluster_path")
    data_dir = tmp_path / "g1"
    times = _confirmed_hourly(data_dir, 5)
    dumped = run_mrs("dump", "pcj", "--data-dir", str(data_dir), "--json",
                     "--since", format_time_ns(times[1]),
                     "--until", format_time_ns(times[3]))  # fmt: skip
    assert dumped.returncode == 0, dumped.stderr
    assert len(dumped.stdout.splitlines()) == 3
    since, until = _window(times[1], times[3])
    sources = {"paths": json.dumps([str(data_dir)])}
    report = compute(spark, sources, since, until).as_json()
    assert report["totals"]["confirmed"] == 3
    assert export(spark, sources, str(tmp_path / "parquet"), since, until)["pcj"] == 3


ARCHIVE_OPS = '[group.ops]\npcj_archive_dir = "old-pcj"\n'
ARCHIVED = 3
"""Of the six confirmed an hour apart from T0, those `mrs pcj archive --until
ARCHIVE_UNTIL` moves to the configured archive."""
ARCHIVE_UNTIL = "2023-11-15T00:30:00Z"


def _archived_to_the_configured_dir(directory: Path) -> tuple[Path, Path]:
    """(bus.toml, group 1's data dir): six confirmed, the first three archived by
    `mrs pcj archive --config` into `[group.ops] pcj_archive_dir = "old-pcj"`."""
    config = write_single_group_config(directory, group_extra=ARCHIVE_OPS)
    data_dir = directory / "g1"
    _confirmed_hourly(data_dir, 6)
    archived = run_mrs("pcj", "archive", "--config", str(config), "--group", "1",
                       "--until", ARCHIVE_UNTIL, "--json")  # fmt: skip
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout)["archived"] == ARCHIVED
    assert list((data_dir / "old-pcj").rglob("*.parquet"))
    return config, data_dir


def _sources(*argv: str) -> dict[str, str]:
    from mrs.audit.command import source_options
    from mrs.tools.cli import build_parser

    return source_options(build_parser().parse_args(["audit", *argv]))


@SPARK_SESSION
@pytest.mark.parametrize("master", ["local", "cluster"])
def test_data_dir_with_config_reads_the_configured_archive(
    spark, tmp_path: Path, request: pytest.FixtureRequest, master: str  # noqa: F811
) -> None:
    """Before: `mrs audit --data-dir D --config bus.toml` looked for the archive in
    D/pcj-archive only, so a group whose config names its own `pcj_archive_dir` had
    its archived messages left out: 3 confirmed of 6 in the report and the export,
    and `--trail` said no record of an archived id. Now the config's archive is read
    whenever the config names one, as with `--config` alone."""
    if master == "cluster":
        request.getfixturevalue("cluster_path")
    config, data_dir = _archived_to_the_configured_dir(tmp_path)
    by_config = _sources("--config", str(config))
    by_dir = _sources("--data-dir", str(data_dir), "--config", str(config))
    for sources in (by_config, by_dir):
        totals = compute(spark, sources).as_json()["totals"]
        assert (totals["confirmed"], totals["missing"], totals["duplicates"]) == (6, 0, 0)
    assert export(spark, by_dir, str(tmp_path / "parquet"))["pcj"] == 6
    trail = run_mrs("audit", "--data-dir", str(data_dir), "--config", str(config),
                    "--trail", "ORD-0", "--json", "--quiet")  # fmt: skip
    assert trail.returncode == 0, trail.stderr
    assert {e["seq"] for e in json.loads(trail.stdout)["events"]} == {GROUP_1_SEQ}


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _history_example() -> str:
    """The docs' Spark example of the full PCJ history (live PCJ + archive): a `text`
    block (it needs the reader's `spark`, so the pasted-docs test does not run it)."""
    text = (DOCS / "audit.md").read_text()
    [block] = [block for _lang, block in FENCE.findall(text)
               if "pcj-archive" in block and "spark.read" in block]  # fmt: skip
    assert "history = " in block, block
    return block


@SPARK_SESSION
def test_the_docs_history_example_counts_each_message_once(spark, tmp_path: Path) -> None:  # noqa: F811
    """Before: docs/audit.md read the live PCJ and the archive with
    `live.unionByName(archived)`, so a record both archived and still live (an
    archive run stopped before its deletes) was two rows of history, while `mrs
    audit` and the export count it once. The page's example, run as it shows it (its
    one path pointed at this group), now has a row per (group, seq)."""
    from tests.audit.test_audit_25c import CONFIRMED, _archived_and_live

    data_dir = tmp_path / "g1"
    _archived_and_live(data_dir)
    source = _history_example().replace("/var/mrs/g1", str(data_dir))
    namespace: dict = {"spark": spark}
    exec(compile(source, "docs/audit.md", "exec"), namespace)  # noqa: S102 - the page's code
    history = namespace["history"]
    assert history.count() == CONFIRMED
    assert history.select("group", "seq").distinct().count() == CONFIRMED
    assert history.where("corrupt IS NULL AND confirm_time IS NOT NULL").count() == CONFIRMED


def _table_schemas(spark, data_dir: Path, out: Path,  # noqa: F811
                   names: dict[str, str] | None = None) -> dict[str, pa.Schema]:  # fmt: skip
    """The schema of each `tables/NAME.parquet` of the audit of `data_dir`."""
    write_tables(compute(spark, {"paths": json.dumps([str(data_dir)])}, names=names), out)
    schemas = {path.stem: pq.read_schema(path) for path in (out / "tables").glob("*.parquet")}
    for name, schema in schemas.items():  # the CSV has the same columns
        header = (out / "tables" / f"{name}.csv").read_text().splitlines()[0]
        assert header.replace('"', "").split(",") == schema.names, name
    return schemas


@SPARK_SESSION
def test_each_table_has_its_columns_with_rows_or_without(spark, tmp_path: Path) -> None:  # noqa: F811
    """Before: a table with no rows (the `gaps` and `duplicates` of a clean audit, the
    `dead_letters` of a group that never dead-lettered) was written as one column
    `empty`, and a column whose values were all null (`sender`/`queue` of gaps
    between two senders) had no type: a data engineer's `SELECT after_seq FROM gaps`
    failed on a clean day, and a month of audits did not read as one dataset. Now
    every table has the columns docs/audit.md lists, typed, whatever its rows."""
    clean, busy = tmp_path / "clean", tmp_path / "busy"
    write_records(clean / "journals", Journal.PCJ, [])
    write_records(busy / "journals", Journal.PCJ, [
        record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=T0_NS + i, source_queue=13 + i // 3)
        for i in (0, 1, 3)
    ])  # fmt: skip
    write_records(busy / "journals", Journal.DLJ, [record(1, seq=GROUP_1_SEQ + 1)])
    empty = _table_schemas(spark, clean, tmp_path / "clean-out")
    full = _table_schemas(spark, busy, tmp_path / "busy-out")
    assert pq.read_table(tmp_path / "busy-out" / "tables" / "gaps.parquet").num_rows == 1
    assert sorted(empty) == sorted(full) == sorted([*TABLES, "totals"])
    for name in full:
        assert empty[name] == full[name], name
    assert empty["gaps"].names == ["after_seq", "before_seq", "missing", "sender", "queue"]
    assert empty["duplicates"].names == ["seq", "source", "target", "places"]
    assert full["gaps"].field("sender").type == pa.string()
    names = {"1.10": "1.ORDERS", "1.13": "1.SENDER"}  # as with --config
    named_empty = _table_schemas(spark, clean, tmp_path / "clean-named", names)
    named_full = _table_schemas(spark, busy, tmp_path / "busy-named", names)
    assert named_empty == named_full
    assert named_empty["gaps"].names[-2:] == ["sender_name", "queue_name"]
