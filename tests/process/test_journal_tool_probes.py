"""What a probe of the journal tools found, held: `mrs dump`, `mrs jplay`, `mrs pcj
archive` and `mrs journal salvage` on a damaged journal, on `--data-dir DIR/journals`,
on selections a 3 a.m. operator mistypes, and what jplay's summary says after a stop
or a refusal no re-run cures. Real journal files, real `mrs` processes and servers."""

from __future__ import annotations

import re
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from clients import MrsError, Status, connect, open_journal
from journals import Journal, JournalStore
from mrs.exit_status import CommandError
from mrs.storage.journal_scan import scan
from mrs.tools.cli import main
from tests.journal_helpers import SEQ_BASE, mrs, record, stopped_bus, write_records

PAGE_BYTES = 4096
PCJ_RECORDS = 2000
"""Enough 1 KiB bodies for a data file of megabytes: cut to 300000 bytes, LMDB
would touch pages past its end (SIGBUS)."""
SEQ_TOO_BIG = str(1 << 64)


def _group_data_dir(tmp_path: Path) -> Path:
    """A stopped group 1's data directory holding a big PCJ and a DQF."""
    bus = stopped_bus(tmp_path / "bus")
    journals = bus.data_dir / "journals"
    write_records(journals, Journal.PCJ, [record(i, body=b"x" * 1000) for i in range(PCJ_RECORDS)])
    dqf = [record(i, seq=100 + i, body=b"dqf-%04d-" % i + b"y" * 150) for i in range(600)]
    write_records(journals, Journal.DQF, dqf)
    return bus.data_dir


def _copy(data_dir: Path, to: Path) -> Path:
    """A copy of the group's journals in `to/journals` (the operator's `cp -r`)."""
    to.mkdir()
    shutil.copytree(data_dir / "journals", to / "journals")
    return to


def _damage_pages_holding(data_file: Path, pattern: bytes) -> int:
    """XOR bytes 8..15 (flags, lower, upper) of every leaf page holding `pattern`."""
    data = bytearray(data_file.read_bytes())
    damaged = 0
    at = data.find(pattern)
    while at >= 0:
        page = at // PAGE_BYTES * PAGE_BYTES
        flags, _lower, upper = struct.unpack_from("<HHH", data, page + 10)
        if flags & 0x02 and at - page >= upper:
            for offset in range(8, 16):
                data[page + offset] ^= 0xFF
            damaged += 1
            at = data.find(pattern, page + PAGE_BYTES)
        else:
            at = data.find(pattern, at + 1)
    data_file.write_bytes(bytes(data))
    return damaged


def _one_line_refusal(result: subprocess.CompletedProcess, data_file: Path) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1, result.stderr
    assert f"journal {data_file} is damaged" in lines[0]
    assert "mrs journal verify" in lines[0] and "mrs journal salvage" in lines[0]
    assert "unexpected error" not in lines[0] and "Traceback" not in result.stderr
    return lines[0]


# ---------------------------------------------------------------------- damaged files
TOOLS_ON_A_COPY = {
    "dump": ["dump", "--group", "1", "pcj"],
    "jplay": ["jplay", "--group", "1", "pcj", "--as", "1.20", "--address", "127.0.0.1:25001"],
    "pcj-archive": ["pcj", "archive", "--group", "1", "--until", "now"],
}


@pytest.mark.parametrize("tool", sorted(TOOLS_ON_A_COPY))
def test_a_journal_cut_short_is_refused_in_one_line_not_a_bus_error(tmp_path, tool) -> None:
    copy = _copy(_group_data_dir(tmp_path), tmp_path / "tr")
    data_file = copy / "journals" / "data.mdb"
    size = data_file.stat().st_size
    assert size > 1_000_000
    data_file.write_bytes(data_file.read_bytes()[:300_000])  # `truncate -s 300000`
    result = mrs(*TOOLS_ON_A_COPY[tool], "--data-dir", str(copy))
    assert _one_line_refusal(result, data_file).startswith("mrs: ")
    assert data_file.stat().st_size == 300_000  # nothing was written to it


@pytest.mark.parametrize(
    "args",
    [["--group", "1", "dqf"], ["pcj"]],
    ids=["group-dqf", "no-group-pcj"],
)
def test_a_damaged_page_is_refused_in_one_line_naming_the_group_journal(tmp_path, args) -> None:
    copy = _copy(_group_data_dir(tmp_path), tmp_path / "f142")
    data_file = copy / "journals" / "data.mdb"
    assert _damage_pages_holding(data_file, b"dqf-0300-") >= 1
    result = mrs("dump", "--data-dir", str(copy), *args)
    line = _one_line_refusal(result, data_file)
    assert "client SAF" not in line and "dqf" in line


def test_a_page_lmdb_cannot_read_ends_a_scan_with_journal_fail(tmp_path) -> None:
    """Past the check before opening (a journal reader, a page damaged since): the
    scan itself turns LMDB's error into one line, status JOURNAL_FAIL."""
    copy = _copy(_group_data_dir(tmp_path), tmp_path / "f142")
    _damage_pages_holding(copy / "journals" / "data.mdb", b"dqf-0300-")
    store = JournalStore(copy / "journals", readonly=True)
    try:
        with pytest.raises(CommandError) as raised:
            for _ in scan(store, Journal.DQF, _Everything()):
                pass
    finally:
        store.close()
    assert raised.value.status == Status.JOURNAL_FAIL and raised.value.exit_code == 1
    assert "(in its dqf database)" in str(raised.value)
    assert "mrs journal salvage" in str(raised.value)


class _Everything:
    seq_min = seq_max = None
    selects_all = True

    def matches(self, record) -> bool:
        return True


def test_salvage_refuses_to_write_inside_the_damaged_journals(tmp_path) -> None:
    copy = _copy(_group_data_dir(tmp_path), tmp_path / "src")
    _damage_pages_holding(copy / "journals" / "data.mdb", b"dqf-0300-")
    before = sorted(path.name for path in (copy / "journals").iterdir())
    result = mrs("journal", "salvage", "--data-dir", str(copy), "--to", str(copy / "journals"))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "inside" in result.stderr
    assert sorted(path.name for path in (copy / "journals").iterdir()) == before


# ---------------------------------------------------------------------- usage
def test_a_queue_number_alone_without_group_is_a_usage_error(tmp_path, capsys) -> None:
    data_dir = _group_data_dir(tmp_path)
    code = main(["dump", "--data-dir", str(data_dir), "--target", "10", "pcj"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("mrs dump: --target: '10'") and "--group" in err
    assert len(err.splitlines()) == 1
    code = main(["dump", "--data-dir", str(data_dir), "--target", "1.10", "--json", "pcj"])
    out, _ = capsys.readouterr()
    assert code == 0 and len(out.splitlines()) == PCJ_RECORDS  # GROUP.QUEUE needs none


@pytest.mark.parametrize("seq", [SEQ_TOO_BIG, f"5..{SEQ_TOO_BIG}", f"{SEQ_TOO_BIG}.."])
@pytest.mark.parametrize("command", ["dump", "jplay"])
def test_a_seq_beyond_64_bits_is_a_usage_error(tmp_path, capsys, command, seq) -> None:
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1)])
    code = main([command, "--config", str(bus.config_path), "--group", "1", "pcj", "--seq", seq])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"mrs {command}: --seq: ") and len(err.splitlines()) == 1
    assert "unexpected error" not in err


def test_an_unknown_queue_in_a_selection_is_named_whole(tmp_path, capsys) -> None:
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1)])
    code = main(
        ["dump", "--config", str(bus.config_path), "--group", "1", "pcj", "--target", "1.1000"]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.rstrip().endswith("'1.1000'"), err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "to, problem",
    [("5.10", "no group 5 on this bus"), ("1.99", "has no queue 99")],
)
def test_jplay_refuses_a_target_the_bus_does_not_have_before_reading(
    tmp_path, capsys, to, problem
) -> None:
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1)])
    code = main(["jplay", "--config", str(bus.config_path), "--group", "1", "pcj", "--to", to])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"mrs jplay: --to {to}: ") and problem in err
    assert not (bus.data_dir / "replay-ledger").exists()


@pytest.mark.parametrize("chunk", ["0", "-1"])
def test_pcj_archive_refuses_a_chunk_below_one(tmp_path, capsys, chunk) -> None:
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1)])
    args = ["--config", str(bus.config_path), "--group", "1", "--until", "now"]
    code = main(["pcj", "archive", *args, "--chunk", chunk])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and f"--chunk {chunk}" in err
    assert len(err.splitlines()) == 1
    assert not (bus.data_dir / "pcj-archive").exists()  # nothing archived


# ---------------------------------------------------------------------- replays
def _jplay_args(bus, data_dir: Path, *args: str) -> list[str]:
    return [
        "jplay", "--data-dir", str(data_dir), "--group", "1", "--address", bus.address,
        "--as", "1.20", "pcj", *args,
    ]  # fmt: skip


async def _received(bus) -> list[int]:
    """The replayed seqs waiting on RESTORE (1.21), each confirmed."""
    seqs = []
    async with connect(bus.address, queue="RESTORE") as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
            except MrsError:
                return seqs
            seqs.append(message.headers["replay"]["seq"])
            await receiver.confirm(message.seq)


async def test_data_dir_and_its_journals_directory_share_one_replay_ledger(
    replay_bus,
) -> None:
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(5)]})
    first = mrs(*_jplay_args(bus, bus.data_dir, "--to", "1.21"))
    assert first.returncode == 0, first.stderr
    again = mrs(*_jplay_args(bus, bus.data_dir / "journals", "--to", "1.21"))
    assert again.returncode == 0, again.stderr
    assert "sent 0, skipped 5 (already replayed)" in again.stderr
    assert not (bus.data_dir / "journals" / "replay-ledger").exists()
    assert sorted(await _received(bus)) == [SEQ_BASE + i for i in range(5)]  # once each


async def test_a_refusal_no_rerun_cures_is_not_advised_a_resume(replay_bus) -> None:
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(3)]})
    result = mrs(*_jplay_args(bus, bus.data_dir, "--to", "5.10"))  # no config: no check
    assert result.returncode == 1
    assert "failed 3" in result.stderr and "NOSUCHQUEUE" in result.stderr
    assert "again to resume" not in result.stderr
    assert "fix what they name" in result.stderr
    assert "Traceback" not in result.stderr


async def test_after_ctrl_c_the_summary_says_what_was_not_attempted(replay_bus) -> None:
    count = 300
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(count)]})
    seen = 0
    enough = trio.Event()
    command = [sys.executable, "-m", "mrs", *_jplay_args(bus, bus.data_dir, "--rate", "40/s")]
    async with connect(bus.address, queue="RESTORE") as receiver:

        async def receive(task_status=trio.TASK_STATUS_IGNORED) -> None:
            nonlocal seen
            with trio.CancelScope() as scope:
                task_status.started(scope)
                while True:
                    message = await receiver.get()
                    await receiver.confirm(message.seq)
                    seen += 1
                    if seen >= 20:
                        enough.set()

        async with trio.open_nursery() as nursery:
            receiving = await nursery.start(receive)
            process = await trio.lowlevel.open_process(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            await enough.wait()
            process.send_signal(signal.SIGINT)
            stderr = b""
            async with process.stderr:
                while chunk := await process.stderr.receive_some():
                    stderr += chunk
            assert await process.wait() == 130
            receiving.cancel()
    text = stderr.decode()
    summary = re.search(
        r"selected (\d+), sent (\d+), skipped (\d+) \(already replayed\), failed (\d+)"
        r"(?: \(\d+ in doubt: sent, no answer\))?, not attempted (\d+)",
        text,
    )
    assert summary is not None, text
    selected, sent, skipped, failed, not_attempted = map(int, summary.groups())
    assert selected == count and not_attempted > 0
    assert sent + skipped + failed + not_attempted == selected
    assert "interrupted (Ctrl-C)" in text and "again to resume" in text


def test_a_journal_reader_gets_journal_fail_for_a_damaged_page(tmp_path) -> None:
    """The application's journal reader scans with the same code: a damaged page is an
    MrsError JOURNAL_FAIL naming the file, not LMDB's own exception."""
    copy = _copy(_group_data_dir(tmp_path), tmp_path / "f142")
    assert _damage_pages_holding(copy / "journals" / "data.mdb", b"corr-1000") >= 1
    with pytest.raises(MrsError) as raised, open_journal(copy, "pcj") as reader:
        for _ in reader:
            pass
    assert raised.value.status == Status.JOURNAL_FAIL
