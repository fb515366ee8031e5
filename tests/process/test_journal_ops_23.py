"""Probes of the journal tools as an operator runs them at 3 a.m.: a replay after the
documented salvage procedure, and the mistakes an unset shell variable makes (`--to
"$RESTORE"`, `--dir "$ARCHIVE"`), and a duration typed too long. Each test says what
was wrong before its fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from journals import Journal
from mrs.tools.journal.ledger import LEDGER_DIRNAME, SECRET_FILENAME
from tests.cli_helpers import run_mrs
from tests.journal_helpers import journal_seqs, record, stopped_bus, write_records
from tests.process.test_jplay import drain, jplay, replayed_seqs

COUNT = 12


def _salvage_and_swap(bus) -> str:
    """The procedure of docs/journal-repair.md on a stopped group: salvage into a new
    directory, move the old one aside and the rescued one in; salvage's output."""
    rescued = bus.data_dir.with_name("g1-rescued")
    salvage = run_mrs(
        "journal",
        "salvage",
        "--config",
        str(bus.config_path),
        "--group",
        "1",
        "--to",
        str(rescued),
    )
    assert salvage.returncode == 0, salvage.stderr
    bus.data_dir.rename(bus.data_dir.with_name("g1-damaged"))
    rescued.rename(bus.data_dir)
    return salvage.stdout


async def test_a_replay_after_salvage_skips_what_was_replayed_before(replay_bus) -> None:
    """`mrs journal salvage` copied the journals alone, and the documented swap left
    jplay's replay ledger behind in the damaged directory: the next `mrs jplay` found
    nothing replayed, made a new key secret, and replayed every record again under new
    idempotency keys; the server stored each a second time (RESTORE got 24 messages
    for 12 records, the two copies' `replay` headers alike). Now salvage carries the
    ledger over, and the second run skips all 12."""
    bus = replay_bus({Journal.PCJ: [record(i) for i in range(COUNT)]})
    code, first, _ = await jplay(bus, "pcj", "--to", "RESTORE", "--json")
    assert code == 0 and first["sent"] == COUNT
    assert bus.process.terminate() == 0
    said = _salvage_and_swap(bus)
    assert "replay_ledger copied with its key secret" in said
    assert (bus.data_dir / LEDGER_DIRNAME / SECRET_FILENAME).stat().st_mode & 0o777 == 0o600
    bus.start()
    code, second, _ = await jplay(bus, "pcj", "--to", "RESTORE", "--json")
    assert code == 0, second
    assert (second["sent"], second["skipped"]) == (0, COUNT)
    received = await drain(bus, "RESTORE")
    assert sorted(replayed_seqs(received)) == [record(i).seq for i in range(COUNT)]


def test_a_salvage_copies_the_key_secret_of_a_ledger_it_cannot_read(tmp_path: Path) -> None:
    """A damaged ledger's entries cannot be copied, but its key secret still can: a
    replay resends under the first keys, which the server's salvaged dedupe journal
    answers as duplicates. Salvage says so and does not fail over it."""
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.DLJ, [record(1, reason=-228)])
    ledger = bus.data_dir / LEDGER_DIRNAME
    ledger.mkdir(mode=0o700)
    (ledger / SECRET_FILENAME).write_text("ab" * 32 + "\n")
    (ledger / "data.mdb").write_bytes(b"\0" * 100)  # cut short: no LMDB file
    rescued = tmp_path / "rescued"
    salvage = run_mrs("journal", "salvage", "--data-dir", str(bus.data_dir), "--to", str(rescued))
    assert salvage.returncode == 0, salvage.stderr
    assert "entries not copied" in salvage.stdout and "key secret copied" in salvage.stdout
    assert (rescued / LEDGER_DIRNAME / SECRET_FILENAME).read_text() == "ab" * 32 + "\n"
    assert not (rescued / LEDGER_DIRNAME / "data.mdb").exists()
    assert journal_seqs(rescued / "journals", Journal.DLJ) == [record(1).seq]
    again = run_mrs("journal", "salvage", "--data-dir", str(bus.data_dir), "--to", str(rescued))
    assert again.returncode == 2 and "already holds journals" in again.stderr
    empty = run_mrs("journal", "salvage", "--data-dir", str(bus.data_dir), "--to", "")
    assert empty.returncode == 2 and "argument --to: empty: give a path" in empty.stderr


@pytest.mark.parametrize("option", ["--to", "--as", "--address"])
def test_an_empty_replay_option_is_refused_not_read_as_absent(tmp_path: Path, option) -> None:
    """`--to "$RESTORE"` with the variable unset passes `--to ''`, which jplay read as
    no `--to`: every record went back to its original target (the production queue)
    instead of RESTORE, exit 0. Now an empty `--to`, `--as` or `--address` is bad
    usage, before anything is read or sent."""
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1)])
    result = run_mrs(
        "jplay",
        "--config",
        str(bus.config_path),
        "--group",
        "1",
        "pcj",
        option,
        "",
        *([] if option == "--address" else ["--address", "127.0.0.1:9"]),
    )
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip()
        == f"mrs jplay: {option} is empty: give a value, or leave {option} out"
    )
    assert not (bus.data_dir / LEDGER_DIRNAME).exists()


def test_an_empty_archive_directory_is_refused_and_the_pcj_kept(tmp_path: Path) -> None:
    """`mrs pcj archive --dir ''` (an unset variable) archived into the directory the
    command ran in and deleted the records from the PCJ. Now it is bad usage."""
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(i) for i in range(3)])
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "pcj", "archive", "--config", str(bus.config_path)]
        + ["--group", "1", "--until", "now", "--dir", ""],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=workdir,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("mrs pcj archive: argument --dir: empty: give a path")
    assert journal_seqs(bus.data_dir / "journals", Journal.PCJ) == [record(i).seq for i in range(3)]
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("command", ["dump", "pcj archive"])
def test_a_duration_too_long_for_a_float_is_a_time_not_a_crash(tmp_path: Path, command) -> None:
    """`--since 999…9h` with more than 308 digits became float infinity: `unexpected
    error: OverflowError`, exit 1. Now it is a time long before any record."""
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1)])
    option = "--since" if command == "dump" else "--until"
    result = run_mrs(
        *command.split(),
        "--config",
        str(bus.config_path),
        "--group",
        "1",
        *(["pcj"] if command == "dump" else []),
        option,
        "9" * 400 + "h",
    )
    assert result.returncode == 0, result.stderr
    assert "unexpected error" not in result.stderr
    assert journal_seqs(bus.data_dir / "journals", Journal.PCJ) == [record(1).seq]
