"""The PCJ's archive as an operator runs it (thirty-fourth session, PCJ probe): what
`mrs status` says of an automatic archive that fails, a killed run's file damaged on
disk, and `--dir` given for a replicated group. Real `mrs` processes, real journals.

Each test names what a user saw before its fix.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq

from clients import connect_sync
from journals import Journal
from mrs.model import DeliveryMode
from sim.etcd import write_replicated_config
from tests.cli_helpers import one_line, run_mrs, status_json
from tests.conftest import STANDARD_QUEUES
from tests.journal_helpers import record, write_records


def test_a_failing_automatic_archive_shows_its_failure_in_status(make_bus) -> None:
    """Before: `mrs status --json`'s `pcj_archive` kept the last run that went well
    (or nothing) while every later run failed, so a monitor reading it saw no
    failure as the PCJ filled; the failure was in the log alone."""
    bus = make_bus(
        group_extra="pcj_default = true\n[group.ops]\npcj_archive_after_s = 0\n"
        "pcj_archive_interval_s = 1"
    )
    (bus.data_dir / "pcj-archive").write_text("not a directory")  # the archive's place taken
    with connect_sync(bus.address, "ANYORDER") as client:
        client.put(b"audited", "ANYORDER", delivery=DeliveryMode.WF_DQF)
        client.confirm(client.get(timeout=10).seq)
    deadline = time.monotonic() + 30
    while "error" not in (archive := status_json("--address", bus.address).get("pcj_archive", {})):
        assert time.monotonic() < deadline, f"no failure shown: {archive}"
        time.sleep(0.2)
    assert "cannot write the archive to" in archive["error"], archive
    assert archive["dir"] == str(bus.data_dir / "pcj-archive")
    assert status_json("--address", bus.address)["journal"]["records"]["pcj"] == 1
    table = run_mrs("status", "--address", bus.address, env={"COLUMNS": "200"}).stdout
    assert "PCJ archive (automatic) failed: " in table, table  # one note, not the dict


def _archived_seqs(directory: Path) -> list[int]:
    return [
        seq
        for path in directory.rglob("*.parquet")
        for seq in pq.read_table(path, columns=["seq"]).column("seq").to_pylist()
    ]


def test_a_killed_runs_damaged_file_is_one_line_and_loses_nothing(tmp_path: Path) -> None:
    """Before: a file of a killed run's chunk damaged on disk ended every later run
    (the automatic one too) with "unexpected error: ArrowInvalid", saying neither
    where the records were nor what to do. Now one line names the file and the way
    out; once it is moved out, the next run archives every record once."""
    write_records(tmp_path / "g1" / "journals", Journal.PCJ, [record(i) for i in range(1, 9)])
    where = ("pcj", "archive", "--data-dir", str(tmp_path / "g1"), "--group", "1")
    killed = run_mrs(*where, "--until", "now", env={"MRS_PCJ_ARCHIVE_KILL_AT": "written"})
    assert killed.returncode == -9, killed.stderr
    directory = tmp_path / "g1" / "pcj-archive"
    (damaged,) = directory.rglob("*.parquet")
    damaged.write_bytes(damaged.read_bytes()[:40])

    refused = run_mrs(*where, "--until", "now")
    one_line(
        refused, 1, str(damaged), "does not read as Parquet", f"move the file out of {directory}"
    )
    dump = run_mrs("dump", "--data-dir", str(tmp_path / "g1"), "pcj", "--json")
    assert len(dump.stdout.splitlines()) == 8, "a record left the PCJ"

    damaged.rename(tmp_path / "damaged.parquet")
    done = run_mrs(*where, "--until", "now", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["archived"] == 8
    assert sorted(_archived_seqs(directory)) == [record(i).seq for i in range(1, 9)]


def test_dir_for_a_replicated_group_is_refused_not_dropped(tmp_path: Path) -> None:
    """Before: `--dir` with `--config` of a replicated group was dropped without a
    word: the active wrote the files to its own `pcj_archive_dir`, not where the
    operator asked. Refused before anything is asked of the group (no etcd needed)."""
    config = write_replicated_config(tmp_path, "http://127.0.0.1:9", STANDARD_QUEUES)
    result = run_mrs(
        "pcj", "archive", "--config", str(config), "--group", "1", "--until", "now",
        "--dir", str(tmp_path / "elsewhere"),
    )  # fmt: skip
    one_line(result, 2, "--dir", "pcj_archive_dir", "replicated")
    chunked = run_mrs(
        "pcj", "archive", "--config", str(config), "--group", "1", "--until", "now",
        "--chunk", "7",
    )  # fmt: skip
    one_line(chunked, 2, "--chunk 7", "replicated")
