"""Operator mistakes at 3 a.m., each run as a real `mrs` process: one line on stderr
naming what is wrong (and what to do), the exit status for it (2: usage, 1: runtime),
no traceback, and nothing done that the mistake did not ask for."""

from __future__ import annotations

from pathlib import Path

import pytest

from journals import Journal
from sim.processes import write_single_group_config
from tests.cli_helpers import one_line, run_mrs
from tests.journal_helpers import journal_seqs, record, write_records


@pytest.mark.parametrize("group", ["0", "-1", "32001", "99999999999999999999"])
def test_a_group_number_no_group_has_archives_nothing(tmp_path: Path, group: str) -> None:
    """Why: `--group 0` read as "no group" skipped the check that the journals are the
    group's own, and `--group -1` passed it for journals that name no group: `mrs pcj
    archive` filed the records under `group=0` (or -1) in Parquet, where the audit
    counts them for a group that does not exist, and deleted them from the PCJ. A
    number past 64 bits failed mid-archive with "Python int too large to convert to C
    long"."""
    journals = tmp_path / "g1" / "journals"
    journals.mkdir(parents=True)
    write_records(journals, Journal.PCJ, [record(index) for index in range(3)])
    kept = journal_seqs(journals, Journal.PCJ)
    archive = tmp_path / "archive"
    for command in (
        ("pcj", "archive", "--until", "now", "--dir", str(archive)),
        ("dump", "pcj"),
        ("journal", "verify"),
    ):
        result = run_mrs(*command, "--data-dir", str(tmp_path / "g1"), "--group", group)
        one_line(result, 2, "argument --group", "1..32000", group)
    assert journal_seqs(journals, Journal.PCJ) == kept
    assert not archive.exists()


@pytest.mark.parametrize(
    "command",
    [
        ("serve", "--config", "{config}", "--group", "1"),
        ("dump", "--config", "{config}", "--group", "1", "pcj"),
        ("dump", "--data-dir", "{data_dir}", "pcj"),
        ("pcj", "archive", "--config", "{config}", "--group", "1", "--until", "now"),
    ],
)
def test_an_empty_journal_file_is_named_empty(tmp_path: Path, command) -> None:
    """Why: a data.mdb of no bytes (a copy cut short, `> data.mdb`) was refused as
    damaged by "Error: .../journals: Bad file descriptor": LMDB's word for failing to
    write a new environment's first pages into a file it opened read-only, which names
    nothing the operator can act on and reads as a bug."""
    config = write_single_group_config(tmp_path)
    journals = tmp_path / "g1" / "journals"
    journals.mkdir(parents=True)
    (journals / "data.mdb").write_bytes(b"")
    given = [part.format(config=config, data_dir=tmp_path / "g1") for part in command]
    text = one_line(run_mrs(*given), 1, "data.mdb is damaged", "empty (0 bytes)")
    assert "Bad file descriptor" not in text
    assert "mrs journal salvage" in text


def test_verify_names_an_empty_journal_file_empty(tmp_path: Path) -> None:
    journals = tmp_path / "g1" / "journals"
    journals.mkdir(parents=True)
    (journals / "data.mdb").write_bytes(b"")
    result = run_mrs("journal", "verify", "--data-dir", str(tmp_path / "g1"))
    assert result.returncode == 1, result
    assert "empty (0 bytes)" in result.stdout and "DAMAGED" in result.stdout
    assert "Bad file descriptor" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("where", "words"),
    [
        ("no-such-dir/creds.toml", ("no-such-dir does not exist", "create it first")),
        ("a-file/creds.toml", ("a-file is not a directory",)),
    ],
)
def test_a_credentials_file_that_cannot_be_written_prints_no_password(
    tmp_path: Path, where: str, words: tuple[str, ...]
) -> None:
    """Why: `--generate` printed the new password before the file was written, so a
    file in a directory that does not exist left the operator holding a password no
    file held (to hand to an application that could then never log in), and the one
    line named the write's temporary file (`.../.creds.toml.d9z_lt38: Not a
    directory`), not the credentials file."""
    (tmp_path / "a-file").write_text("not a directory\n")
    path = tmp_path / where
    result = run_mrs("creds", "add", "app", "--file", str(path), "--generate")
    text = one_line(result, 1, f"cannot write the credentials file {path}", *words)
    assert result.stdout == ""
    assert ".creds.toml." not in text
    made = run_mrs("creds", "add", "app", "--file", str(tmp_path / "c.toml"), "--generate")
    assert made.returncode == 0 and len(made.stdout.split()) == 1, made  # once written


@pytest.mark.parametrize(
    ("args", "code", "words", "not_words"),
    [
        # was "mrs: .../a-file: File exists", exit 1: it named no option
        (("bench", "--scratch", "{a_file}"), 2, ("--scratch", "not a directory"), ()),
        (("bench", "--scratch", "{a_file}/sub"), 2, ("--scratch", "cannot make it"), ()),
        # was "...: [Errno 2] No such file or directory: '/.../none.rules'"
        (
            ("dlq-handler", "{tmp}/none.rules", "--config", "{config}", "--group", "1"),
            2,
            ("cannot read the rules table", "none.rules: No such file or directory"),
            ("[Errno",),
        ),
    ],
)
def test_a_path_that_cannot_be_used_names_its_option(
    tmp_path: Path, args, code: int, words, not_words
) -> None:
    config = write_single_group_config(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    given = [part.format(a_file=a_file, tmp=tmp_path, config=config) for part in args]
    text = one_line(run_mrs(*given), code, *words)
    for word in not_words:
        assert word not in text
    assert a_file.read_text() == "not a directory\n"
