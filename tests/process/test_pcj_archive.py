"""`mrs pcj archive`: PCJ records to Parquet and out of the journal, beside a live
server, read back with pyarrow; SIGKILL at any moment loses and duplicates nothing."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from clients import connect_sync, open_journal
from journals import Journal
from mrs.model import DeliveryMode
from tests.journal_helpers import record, write_records

ROOT = Path(__file__).resolve().parents[2]


def _mrs(
    *args: str, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=cwd,
    )


def _confirm(address: str, count: int, tag: str) -> set[int]:
    """Put, get and confirm `count` messages: each leaves one PCJ record."""
    seqs = set()
    with connect_sync(address, "ORDERS") as client:
        for i in range(count):
            client.put(f"{tag} {i}".encode(), "1.10", delivery=DeliveryMode.WF_DQF)
        for _ in range(count):
            message = client.get(timeout=10)
            message.confirm()
            seqs.add(message.seq)
    return seqs


def _archived_seqs(directory: Path) -> list[int]:
    seqs: list[int] = []
    for path in sorted(directory.rglob("*.parquet")):
        seqs.extend(pq.read_table(path, columns=["seq"]).column("seq").to_pylist())
    return seqs


def _pcj_count(address: str) -> int:
    result = _mrs("status", "--address", address, "--json")
    return json.loads(result.stdout)["journal"]["records"]["pcj"]


def _archive(bus, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return _mrs("pcj", "archive", "--config", str(bus.config_path), "--group", "1", *extra, env=env)


def test_archive_beside_a_running_server_and_read_back(make_bus) -> None:
    bus = make_bus(group_extra="pcj_default = true")
    early = _confirm(bus.address, 30, "early")
    time.sleep(0.05)
    cut = time.time()
    time.sleep(0.05)
    late = _confirm(bus.address, 20, "late")
    assert _pcj_count(bus.address) == 50

    cut_iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(cut)) + f".{int(cut % 1 * 1e6):06d}Z"
    result = _archive(bus, "--until", cut_iso, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    directory = Path(summary["dir"])
    assert directory == bus.data_dir / "pcj-archive"
    assert summary["archived"] == 30 and summary["pcj_remaining"] == 20
    assert sorted(_archived_seqs(directory)) == sorted(early)
    assert _pcj_count(bus.address) == 20

    table = pq.read_table(summary["files"][0])
    assert set(table.column("journal").to_pylist()) == {"pcj"}
    assert all(body.startswith(b"early") for body in table.column("body").to_pylist())

    # the server kept serving throughout, and archives the rest later
    more = _confirm(bus.address, 5, "more")
    result = _archive(bus, "--until", "now")
    assert result.returncode == 0 and "archived 25 PCJ records" in result.stdout
    archived = _archived_seqs(directory)
    assert sorted(archived) == sorted(early | late | more) and len(set(archived)) == 55
    assert _pcj_count(bus.address) == 0


def test_a_server_killed_after_an_archive_beside_it_starts_and_loses_nothing(make_bus) -> None:
    """The archive wrote beside the server through the server's own commit log (its
    replay, numbering and checkpoints): the server's next start after a SIGKILL was
    refused ("the journals end at commit N, before their log's checkpoint at M"), its
    messages out of reach. It writes as a guest now, its commits synced on their own."""
    bus = make_bus(group_extra="pcj_default = true")
    confirmed = _confirm(bus.address, 20, "old")
    result = _archive(bus, "--until", "now", "--chunk", "1")
    assert result.returncode == 0, result.stderr
    with connect_sync(bus.address, "SENDER") as sender:
        for i in range(3):
            sender.put(b"after %d" % i, "1.10", delivery=DeliveryMode.WF_DQF)
    bus.kill()
    address = bus.start()
    with connect_sync(address, "ORDERS") as receiver:
        bodies = [receiver.get(timeout=10).body for _ in range(3)]
    assert bodies == [b"after 0", b"after 1", b"after 2"]
    assert sorted(_archived_seqs(bus.data_dir / "pcj-archive")) == sorted(confirmed)
    assert _pcj_count(address) == 0


def test_archive_closed_takes_the_segments_a_roll_closed(make_bus) -> None:
    """`Client.set_pcj(roll=True)` closes segment 0: `--closed` archives it whole
    while the server journals into segment 1, which stays."""
    bus = make_bus(group_extra="pcj_default = true")
    first = _confirm(bus.address, 12, "first")
    with connect_sync(bus.address, None) as client:
        assert client.set_pcj(roll=True).closed_segment == 0
    second = _confirm(bus.address, 7, "second")
    result = _archive(bus, "--closed", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["archived"] == 12 and summary["pcj_remaining"] == 7
    assert sorted(_archived_seqs(Path(summary["dir"]))) == sorted(first)
    with open_journal(bus.data_dir, "pcj") as journal:
        assert {(record.seq, record.segment) for record in journal} == {(s, 1) for s in second}
    neither = _archive(bus)
    assert neither.returncode == 2 and "--until TIME, --closed" in neither.stderr


def test_usage_mistakes_are_one_line(make_bus) -> None:
    bus = make_bus(group_extra="pcj_default = true")
    bad = _archive(bus, "--until", "yesterday-ish")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "--until" in bad.stderr


def _kill_then_finish(bus, expected: set[int], runs: list[dict]) -> None:
    directory = bus.data_dir / "pcj-archive"
    for env in runs:
        result = _archive(bus, "--until", "now", "--chunk", "40", env=env)
        assert result.returncode == -signal.SIGKILL, (result.returncode, result.stderr)
    result = _archive(bus, "--until", "now", "--chunk", "40", "--json")
    assert result.returncode == 0, result.stderr
    archived = _archived_seqs(directory)
    assert len(archived) == len(set(archived)), "a record was archived twice"
    assert set(archived) == expected, "a record was lost"
    assert _pcj_count(bus.address) == 0
    assert not [p for p in directory.rglob("*") if p.name.endswith(".tmp")]


def test_sigkill_after_the_intent_or_after_the_files_loses_and_duplicates_nothing(
    make_bus,
) -> None:
    bus = make_bus(group_extra="pcj_default = true")
    expected = _confirm(bus.address, 100, "m")
    _kill_then_finish(
        bus,
        expected,
        [{"MRS_PCJ_ARCHIVE_KILL_AT": "written"}, {"MRS_PCJ_ARCHIVE_KILL_AT": "intent"}],
    )


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(make_bus) -> None:
    bus = make_bus(group_extra="pcj_default = true")
    expected = _confirm(bus.address, 300, "r")
    directory = bus.data_dir / "pcj-archive"
    rng = random.Random(16)
    command = [
        sys.executable, "-m", "mrs", "pcj", "archive", "--config", str(bus.config_path),
        "--group", "1", "--until", "now", "--chunk", "5",
    ]  # fmt: skip
    progress = []
    for _ in range(4):
        before = len(list(directory.rglob("*.parquet"))) if directory.exists() else 0
        wanted = before + rng.randint(1, 12)
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            if directory.exists() and len(list(directory.rglob("*.parquet"))) >= wanted:
                break
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL, "the archive ended before it was killed"
        progress.append(len(_archived_seqs(directory)))
    assert 0 < progress[-1] < 300  # killed part-way, more than once
    _kill_then_finish(bus, expected, [])
    assert len(_archived_seqs(directory)) == 300


def test_the_automatic_policy_archives_in_the_background(make_bus) -> None:
    bus = make_bus(
        group_extra="pcj_default = true\n[group.ops]\npcj_archive_after_s = 0\n"
        "pcj_archive_interval_s = 1"
    )
    expected = _confirm(bus.address, 20, "auto")
    deadline = time.monotonic() + 60
    while _pcj_count(bus.address) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pcj_count(bus.address) == 0
    assert set(_archived_seqs(bus.data_dir / "pcj-archive")) == expected
    status = json.loads(_mrs("status", "--address", bus.address, "--json").stdout)
    assert "pcj_archive" in status and "automatic PCJ archive: " in bus.log_text()


def test_the_archive_directory_is_named_whole(tmp_path: Path) -> None:
    """Run from the data directory's parent with a relative --data-dir, the line named
    `g1/pcj-archive`: useless to an operator who pastes it elsewhere (a cron mail)."""
    write_records(tmp_path / "g1" / "journals", Journal.PCJ, [record(1), record(2)])
    where = ("pcj", "archive", "--data-dir", "g1", "--group", "1", "--until", "now")
    result = _mrs(*where, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f" to {tmp_path / 'g1' / 'pcj-archive'} in " in result.stdout, result.stdout
    listed = _mrs(*where, "--json", cwd=tmp_path)
    assert json.loads(listed.stdout)["dir"] == str(tmp_path / "g1" / "pcj-archive")
