"""The Spark audit as an auditor uses it with a bus config and the other journal tools:
`--data-dir` with `--config` saying which groups journal only FORCE_JRN confirms, and
`--trail` times pasted into `mrs dump --until`.

Real LMDB journals, the real `mrs` command in child processes and the test session's
one local Spark session (`spark`).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from journals import Journal
from mrs.audit.report import compute
from sim.processes import write_single_group_config
from tests.audit.test_audit_26 import _sources
from tests.audit_fixtures import SPARK_SESSION, spark  # noqa: F401 - fixture
from tests.cli_helpers import run_mrs
from tests.journal_helpers import T0_NS, record, write_records

GROUP_1_SEQ = 1 << 49
GROUP_2_SEQ = 2 << 49
NOT_JOURNALED = "group {group} has pcj_default = false"
TWO_GROUPS = """\
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:0"
data_dir = "g1"
pcj_default = {pcj_1}
[[group]]
id = 2
name = "LON"
listen = "127.0.0.1:0"
data_dir = "g2"
pcj_default = {pcj_2}
"""


def _two_groups(directory: Path, pcj_1: bool, pcj_2: bool) -> Path:
    """bus.toml of groups 1 and 2 (data dirs g1, g2, each with a confirmed record)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "bus.toml"
    config.write_text(TWO_GROUPS.format(pcj_1=str(pcj_1).lower(), pcj_2=str(pcj_2).lower()))
    for group, seq in ((1, GROUP_1_SEQ), (2, GROUP_2_SEQ)):
        write_records(directory / f"g{group}" / "journals", Journal.PCJ, [
            record(0, seq=seq, target_group=group, source_group=group, confirm_time_ns=T0_NS)
        ])  # fmt: skip
    return config


def _notes(spark, *argv: str) -> list[str]:  # noqa: F811
    return compute(spark, _sources(*argv)).as_json()["notes"]


@SPARK_SESSION
def test_data_dir_with_config_notes_unjournaled_confirms(spark, tmp_path: Path) -> None:  # noqa: F811
    """Before: `mrs audit --data-dir D --config bus.toml` left out the note that D's
    group has `pcj_default = false`, which `--config` alone gives: an auditor saw its
    confirms without FORCE_JRN counted as missing with nothing to say why. Now a
    directory's group is the one `--config` says (its data_dir, an instance's, else
    its journal's group), and the note is the same by either route."""
    config = _two_groups(tmp_path / "bus", pcj_1=False, pcj_2=True)
    g1, g2 = tmp_path / "bus" / "g1", tmp_path / "bus" / "g2"
    by_config = _notes(spark, "--config", str(config), "--group", "1")
    assert [n for n in by_config if NOT_JOURNALED.format(group=1) in n], by_config
    by_dir = _notes(spark, "--data-dir", str(g1), "--config", str(config))
    assert by_dir == by_config
    assert not _notes(spark, "--data-dir", str(g2), "--config", str(config))
    both = _notes(spark, "--data-dir", str(g1), "--data-dir", str(g2), "--config", str(config))
    assert both == by_config
    copy = tmp_path / "restored-copy"  # not a data_dir of the config: its journal's group
    shutil.copytree(g1, copy)
    assert _notes(spark, "--data-dir", str(copy), "--config", str(config)) == by_config


def test_cli_json_carries_the_note(tmp_path: Path) -> None:
    """The same through the command an operator runs (`--json`'s `notes`)."""
    config = write_single_group_config(tmp_path)  # pcj_default: false by default
    write_records(tmp_path / "g1" / "journals", Journal.PCJ, [
        record(0, seq=GROUP_1_SEQ, confirm_time_ns=T0_NS)
    ])  # fmt: skip
    done = run_mrs("audit", "--data-dir", str(tmp_path / "g1"), "--config", str(config),
                   "--json", "--quiet", timeout_s=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    notes = json.loads(done.stdout)["notes"]
    assert [n for n in notes if NOT_JOURNALED.format(group=1) in n], notes


A_NS = T0_NS + 123_456_100
"""Two records confirmed in the same microsecond: A, then B 800 ns later."""
B_NS = A_NS + 800
ISO_NS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.(\d{6}|\d{9})Z$")


def _same_microsecond(data_dir: Path) -> None:
    """PCJ records A (ORD-A) and B (ORD-B) confirmed in one microsecond, and a
    message of ORD-W waiting in the DQF since a whole microsecond."""
    write_records(data_dir / "journals", Journal.PCJ, [
        record(0, seq=GROUP_1_SEQ, confirm_time_ns=A_NS, written_time_ns=A_NS,
               put_time_ns=A_NS - 5_000_000_001, correlation_id=b"ORD-A"),
        record(1, seq=GROUP_1_SEQ + 1, confirm_time_ns=B_NS, written_time_ns=B_NS,
               put_time_ns=A_NS - 5_000_000_000, correlation_id=b"ORD-B"),
    ])  # fmt: skip
    write_records(data_dir / "journals", Journal.DQF, [
        record(2, seq=GROUP_1_SEQ + 2, put_time_ns=T0_NS, written_time_ns=T0_NS + 7_000,
               correlation_id=b"ORD-W"),
    ])  # fmt: skip


def _dumped_seqs(data_dir: Path, until: str) -> set[int]:
    done = run_mrs("dump", "pcj", "--data-dir", str(data_dir), "--json", "--until", until)
    assert done.returncode == 0, done.stderr
    return {json.loads(line)["seq"] for line in done.stdout.splitlines()}


def test_trail_times_are_the_exact_instants(tmp_path: Path) -> None:
    """Before: `--trail` printed times cut to the microsecond (`...23.123456Z`) while
    the journals keep nanoseconds, so a confirm time from the trail pasted into `mrs
    dump --until` fell before that very record's and left it out. Now the trail
    prints the exact instant, as `mrs dump --json` does (six digits on a whole
    microsecond), and events of one microsecond are in their order."""
    data_dir = tmp_path / "g1"
    _same_microsecond(data_dir)
    done = run_mrs("audit", "--data-dir", str(data_dir), "--trail", "ORD-A", "--json",
                   "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = json.loads(done.stdout)["events"]
    times = {e["event"]: e["time"] for e in events}
    assert all(ISO_NS.match(t) for t in times.values()), times
    assert times["confirm"].endswith(".123456100Z"), times
    assert times["put"].endswith("15.123456099Z"), times
    assert _dumped_seqs(data_dir, times["confirm"]) == {GROUP_1_SEQ}
    text = run_mrs("audit", "--data-dir", str(data_dir), "--trail", "ORD-A", "--quiet")
    assert text.returncode == 0, text.stderr
    assert [line.split()[0] for line in text.stdout.splitlines()] == [
        times["put"], times["delivered"], times["confirm"]]  # fmt: skip
    waiting = run_mrs("audit", "--data-dir", str(data_dir), "--trail", "ORD-W", "--json",
                      "--quiet")  # fmt: skip
    assert waiting.returncode == 0, waiting.stderr
    assert [e["time"] for e in json.loads(waiting.stdout)["events"]] == [
        "2023-11-14T22:13:20.000000Z", "2023-11-14T22:13:20.000007Z"]  # fmt: skip


def test_trail_of_an_archived_record_gives_the_microsecond_its_archive_keeps(
    tmp_path: Path,
) -> None:
    """An archived record's times are those of its Parquet file (microseconds), a live
    record's those of its journal (nanoseconds): each the instant its place keeps."""
    from tests.audit.test_audit_26 import _archived_to_the_configured_dir

    config, data_dir = _archived_to_the_configured_dir(tmp_path)
    confirms = {}
    for correlation_id in ("ORD-0", "ORD-4"):
        done = run_mrs("audit", "--data-dir", str(data_dir), "--config", str(config),
                       "--trail", correlation_id, "--json", "--quiet")  # fmt: skip
        assert done.returncode == 0, done.stderr
        events = json.loads(done.stdout)["events"]
        [confirms[correlation_id]] = [e["time"] for e in events if e["event"] == "confirm"]
    assert confirms["ORD-0"].endswith(":13:20.123456Z"), confirms
    assert confirms["ORD-4"].endswith(":13:20.123456789Z"), confirms


REPLICATED = Path(__file__).resolve().parents[2] / "docs" / "examples" / "replicated.toml"
INSTANCES = ("r1a", "r1b", "r1c")


def _replicated_after_archive_runs(directory: Path, archived_by: dict[str, range]) -> Path:
    """docs/examples/replicated.toml's three instances of group 1 after the PCJ archive
    runs of `archived_by` (instance data dir -> the records that instance, active then,
    archived into its own `pcj-archive`, as `mrs.ops.pcj_retention.run_here` does):
    every instance's PCJ holds the six confirmed messages less every archived one (the
    deletes went through the group's writer to every instance)."""
    from mrs.audit.parquet import write_records as write_archive

    directory.mkdir(parents=True)
    config = directory / "replicated.toml"
    shutil.copy(REPLICATED, config)
    items = [record(i, seq=GROUP_1_SEQ + i, confirm_time_ns=T0_NS + i,
                    correlation_id=b"REP-%d" % i) for i in range(6)]  # fmt: skip
    gone = {i for chunk in archived_by.values() for i in chunk}
    for instance in INSTANCES:
        live = [item for i, item in enumerate(items) if i not in gone]
        write_records(directory / instance / "journals", Journal.PCJ, live)
    for instance, chunk in archived_by.items():
        write_archive([items[i] for i in chunk], directory / instance / "pcj-archive", group=1)
    return config


@pytest.mark.parametrize("archived_by", [
    {"r1b": range(3)},                       # b, active, archived the first three
    {"r1b": range(3), "r1c": range(2, 5)},   # then c, active after a failover that cut
])  # fmt: skip                             # b's last chunk before its delete
@SPARK_SESSION
def test_each_in_sync_instance_gives_the_same_audit(
    spark, tmp_path: Path, archived_by: dict[str, range]  # noqa: F811
) -> None:
    """Before: `mrs audit --data-dir r1c --config replicated.toml` read r1c's own
    `pcj-archive` only, but a replicated group's archive is written by the active into
    ITS `pcj_archive_dir` and the deletes reach every instance: audited from a replica
    (or from the active after a failover) every archived message was missing and not
    confirmed, so the answer depended on which in-sync instance the auditor chose. Now
    each instance's directory reads every instance's archive (a seq archived twice, by
    a failover between a chunk's files and its delete, is one message)."""
    from mrs.audit.report import export

    config = _replicated_after_archive_runs(tmp_path / "bus", archived_by)
    for instance in INSTANCES:
        sources = _sources("--data-dir", str(tmp_path / "bus" / instance), "--config",
                           str(config))  # fmt: skip
        report = compute(spark, sources).as_json()
        totals = report["totals"]
        assert (totals["confirmed"], totals["missing"], totals["duplicates"]) == (6, 0, 0), \
            (instance, report["gaps"], report["duplicates"])  # fmt: skip
        assert totals["correlation_duplicate_confirms"] == 0, instance
        assert export(spark, sources, str(tmp_path / f"export-{instance}"))["pcj"] == 6
