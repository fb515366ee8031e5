"""Probes of the journal tools and of `mrs audit`'s housekeeping, as an operator runs
them at 3 a.m.: a replay in slices of `--limit N`, and what an audit leaves in
`$TMPDIR`. Each test says what was wrong before its fix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from journals import Journal
from tests.cli_helpers import run_mrs
from tests.journal_helpers import journal_seqs, record, write_records
from tests.process.test_jplay import drain, jplay, replayed_seqs

SLICED = 12
SLICE = 5


async def _jplay_json(bus, *args: str) -> tuple[int, dict]:
    """`mrs jplay ARGS --json`: (exit status, its summary or dry-run plan)."""
    code, summary, _ = await jplay(bus, *args, "--json")
    assert isinstance(summary, dict)
    return code, summary


async def test_a_replay_in_slices_of_limit_sends_n_new_records_each_run(replay_bus) -> None:
    """`--limit N` counted the records the ledger skipped as already replayed: the
    second `--limit 5` run of 12 records sent none (`selected 5, sent 0, skipped 5`),
    so an operator replaying in slices never got past the first slice. Now `--limit`
    counts what this run replays; the summary says how many it skipped on the way."""
    bus = replay_bus({Journal.PCJ: [record(i) for i in range(SLICED)]})
    expected = [(5, 0), (5, 5), (2, 10), (0, 12)]  # (sent, skipped) of each run
    for sent, skipped in expected:
        code, plan = await _jplay_json(bus, "pcj", "--to", "RESTORE", "--limit", "5", "--dry-run")
        assert code == 0 and (plan["would_send"], plan["would_skip"]) == (sent, skipped), plan
        code, summary = await _jplay_json(bus, "pcj", "--to", "RESTORE", "--limit", str(SLICE))
        assert code == 0, summary
        assert (summary["sent"], summary["skipped"]) == (sent, skipped), summary
        assert summary["selected"] == sent + skipped
    code, text, stderr = await jplay(bus, "pcj", "--to", "RESTORE", "--limit", str(SLICE))
    assert code == 0 and "sent 0, skipped 12 (already replayed)" in stderr, (text, stderr)
    received = await drain(bus, "RESTORE")
    assert sorted(replayed_seqs(received)) == [record(i).seq for i in range(SLICED)]


async def test_an_again_replay_in_slices_counts_what_it_replays(replay_bus) -> None:
    """`--again --limit N` continues its round: each run replays N more records under
    the new generation; the ones this round already replayed do not use up N."""
    bus = replay_bus({Journal.PCJ: [record(i) for i in range(SLICED)]})
    code, first = await _jplay_json(bus, "pcj", "--to", "RESTORE")
    assert code == 0 and first["sent"] == SLICED
    sent_by_run = []
    for _ in range(3):
        code, summary = await _jplay_json(bus, "pcj", "--to", "RESTORE", "--again", "--limit",
                                          str(SLICE))  # fmt: skip
        assert code == 0, summary
        sent_by_run.append(summary["sent"])
    assert sent_by_run == [5, 5, 2]
    received = await drain(bus, "RESTORE")
    generations = sorted(
        (message.headers["replay"]["generation"], message.headers["replay"]["seq"])
        for message in received
    )
    assert generations == sorted(
        (generation, record(i).seq) for generation in (1, 2) for i in range(SLICED)
    )


# ---------------------------------------------------------------------- mrs pcj archive
def _archived_seqs(directory: Path) -> list[int]:
    if not directory.exists():
        return []
    return [
        seq
        for path in sorted(directory.rglob("*.parquet"))
        for seq in pq.read_table(path, columns=["seq"]).column("seq").to_pylist()
    ]


def test_an_archive_killed_in_one_directory_is_finished_there_not_copied_again(
    tmp_path: Path,
) -> None:
    """A run killed after its files were written to `--dir A` (a cron job's timeout),
    then a run writing elsewhere (`--dir B`, the default, the automatic policy): the
    second looked for the killed run's files in B, found none, cleared its intent, and
    archived its records a second time, in B. Now the intent names A: the records there
    leave the PCJ, and each record is in one archive file."""
    data_dir = tmp_path / "g"
    items = [record(i) for i in range(6)]
    write_records(data_dir / "journals", Journal.PCJ, items)
    first, second = tmp_path / "archive-a", tmp_path / "archive-b"
    where = ("pcj", "archive", "--data-dir", str(data_dir), "--group", "1", "--until", "now")
    killed = run_mrs(*where, "--dir", str(first), env={"MRS_PCJ_ARCHIVE_KILL_AT": "written"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sorted(_archived_seqs(first)) == [item.seq for item in items]
    result = run_mrs(*where, "--dir", str(second), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["recovered"], summary["archived"]) == (6, 0), summary
    assert f"in {first}" in result.stderr, result.stderr
    assert _archived_seqs(second) == []
    assert journal_seqs(data_dir / "journals", Journal.PCJ) == []


# ---------------------------------------------------------------------- mrs audit
def _audit_files(directory: Path) -> list[str]:
    """What an audit may leave in a temporary directory: its files are `mrs-audit*`."""
    return sorted(path.name for path in directory.iterdir() if path.name.startswith("mrs-audit"))


def test_an_audit_that_ends_leaves_nothing_in_tmpdir(tmp_path: Path) -> None:
    """Every audit wrote `mrs-audit-log4j2.properties` (Spark's log settings) into
    `$TMPDIR` and left it there, shared by every user of the machine. Now the JVM reads
    the package's own file; a whole local audit leaves nothing in `$TMPDIR`."""
    write_records(tmp_path / "g" / "journals", Journal.PCJ, [record(i) for i in range(3)])
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = run_mrs("audit", "--data-dir", str(tmp_path / "g"), "--json", "--quiet",
                     timeout_s=300, env={"TMPDIR": str(temporary)})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["html"] is None
    assert _audit_files(temporary) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_an_audit_stopped_by_a_signal_says_so_and_leaves_no_log(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """`kill` (a service stopped, `timeout`) or a closed terminal ended the audit at
    once by the signal's default: no line, and its temporary Spark log stayed in
    `$TMPDIR` (Ctrl-C alone removed it). Now each is one line, exit 128 + signal, and
    nothing of the run is left there."""
    write_records(tmp_path / "g" / "journals", Journal.PCJ, [record(1)])
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "mrs", "audit", "--data-dir", str(tmp_path / "g")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(temporary)},
    )  # fmt: skip
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # the JVM is starting: its log exists
        seen.append(line)
        if "read PCJ" in line:
            break
    assert _audit_files(temporary) != [], "".join(seen)
    process.send_signal(signum)
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 128 + signum, "".join(seen) + rest
    assert rest.strip() == f"mrs audit: stopped ({signum.name})"
    assert _audit_files(temporary) == []
