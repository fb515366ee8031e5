"""`mrs dlq-handler` with INPUTQ(DLJ) as an operator meets it, against real group
processes and their real DLJ: a record the rules leave (IGNORE) is passed over, not
held against `--seen-max` as a leased DLQ letter is, so the records behind it are
reached; the notes say "in the DLJ", not "on the DLQ"; and `mrs journal salvage
--to FILE` is a usage error."""

from __future__ import annotations

import argparse
import errno
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, Uma
from journals import Journal, JournalStore, Record
from mrs.config.bus import load_config
from mrs.dlq import sources
from mrs.dlq.command import _names
from mrs.dlq.engine import Engine
from mrs.dlq.handler import Handler, HandlerOptions
from mrs.dlq.parser import parse_table
from mrs.dlq.report import Reporter
from mrs.offline.journal_files import locate
from tests.client_helpers import take_all
from tests.journal_helpers import record, stopped_bus
from tests.process.test_dlq_handler_24 import _read_line

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0
LEFT_THEN_CAUGHT = (
    "INPUTQ(DLJ) {wait}\n"
    "DESTQ(51) ACTION(IGNORE)\n"
    "ACTION(FWD) FWDQ(ANYORDER)\n"
)  # fmt: skip


def _records(left: int, caught: int) -> list[Record]:
    """`left` records for 1.51 (IGNOREd), then, behind them in key order, `caught`
    records for 1.10 that the catch-all forwards."""
    return [
        *(record(i, target_queue=51, reason=-1004) for i in range(1, left + 1)),
        *(record(i, reason=-1004) for i in range(left + 1, left + caught + 1)),
    ]


def _dlj_seqs(journals: Path) -> set[int]:
    store = JournalStore(journals, readonly=True)
    try:
        return {item.seq for _key, item in store.scan(Journal.DLJ) if isinstance(item, Record)}
    finally:
        store.close()


async def _run_cli(bus, rules: str, *extra: str) -> tuple[int, list[dict], str]:
    """The handler as an operator runs it: (exit code, its JSON lines, stderr)."""
    path = bus.config_path.parent / "handler.rules"
    path.write_text(rules)
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path)]
    command += ["--group", "1", "--address", bus.address, "--json", *extra, str(path)]
    with trio.fail_after(WAIT_S):
        done = await trio.run_process(
            command, capture_stdout=True, capture_stderr=True, cwd=ROOT, check=False
        )
    lines = [json.loads(line) for line in done.stdout.decode().splitlines()]
    return done.returncode, lines, done.stderr.decode()


# ------------------------------------- left records do not hold back those behind them
async def test_dlj_records_left_do_not_count_against_seen_max(replay_bus) -> None:
    """Why: five IGNOREd DLJ records held `--seen-max 5` full, as five leased DLQ
    letters do, and the run ended without looking at the three records behind them,
    which the catch-all rule forwards. A DLJ record has no lease: the handler passes
    over one it leaves and reaches every record, each looked at once."""
    bus = replay_bus({Journal.DLJ: _records(5, 3)})
    code, lines, stderr = await _run_cli(
        bus, LEFT_THEN_CAUGHT.format(wait="WAIT(NO)"), "--seen-max", "5"
    )
    assert code == 0, (lines, stderr)
    events = [line for line in lines if "seq" in line]
    outcomes = sorted((event["seq"] - record(0).seq, event["outcome"]) for event in events)
    assert outcomes == [
        *((i, "left") for i in range(1, 6)),
        *((i, "forwarded") for i in range(6, 9)),
    ]
    assert not [line for line in lines if "not looked at" in line.get("note", "")], lines
    assert lines[-1]["summary"]["forwarded"] == 3 and lines[-1]["summary"]["ignored"] == 5
    assert lines[-1]["summary"]["held_not_removed"] == 0
    assert _dlj_seqs(bus.data_dir / "journals") == {record(i).seq for i in range(1, 6)}
    async with bus.connect(queue="ANYORDER") as target:
        bodies = [message.body for message in await take_all(target)]
    assert sorted(bodies) == [f"order {i}".encode() for i in range(6, 9)]  # by priority


# ----------------------------------------------- the ending note names the DLJ, not the DLQ
class _FailRemovals:
    """A fault hook for the handler's own DLJ commits: the attempt marks pass, every
    removal fails at its flush (EIO), so a forwarded record stays held by the run."""

    def __init__(self) -> None:
        self.phase_commit = 0

    def __call__(self, phase: str) -> None:
        if phase == "commit":
            self.phase_commit += 1
        elif self.phase_commit > 1:  # commit 1: the mark; then the removal's tries
            raise OSError(errno.EIO, "injected EIO")


async def test_dlj_record_full_note_says_left_in_the_dlj(replay_bus, monkeypatch) -> None:
    """Why: with INPUTQ(DLJ), a run whose record was full of records it could not
    remove ended with "... held are left on the DLQ": the operator looked at an
    empty DLQ. It says "left in the DLJ"."""
    bus = replay_bus({Journal.DLJ: _records(0, 2)})
    monkeypatch.setattr(sources, "file_fault_hook", lambda _path: _FailRemovals())
    config = load_config(bus.config_path)
    where = locate(argparse.Namespace(config=bus.config_path, group=1, data_dir=None))
    options = HandlerOptions(
        bus.address, 1, config, wait_s=0, window=2, seen_max=1, dlj=where,
        fault_file=Path("scripted"),
    )  # fmt: skip
    out = io.StringIO()
    rules = parse_table(LEFT_THEN_CAUGHT.format(wait="WAIT(NO)"))
    handler = Handler(Engine(rules, names=_names(config), seen_max=1), options, Reporter(True, out))
    with trio.fail_after(WAIT_S):
        await handler.run()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    [event] = [line for line in lines if "seq" in line]
    assert event["outcome"] == "forwarded" and "not removed from the DLJ" in event["detail"]
    [note] = [line["note"] for line in lines if "note" in line and "ending" in line["note"]]
    assert "1 messages held are left in the DLJ" in note and "DLQ" not in note, note


# ------------------------------------------------------- salvage --to a regular file
@pytest.mark.parametrize("under", ["", "sub"])
def test_salvage_to_a_file_is_a_usage_error(tmp_path, under: str) -> None:
    """Why: `--to` naming a regular file (or a path under one) ended "cannot write
    the copy ...: Not a directory ... make room", exit 1, as a full disk does: an
    operator's mistake they fix by naming a directory is a usage error, exit 2."""
    bus = stopped_bus(tmp_path / "bus")
    JournalStore(bus.data_dir / "journals").close()
    afile = tmp_path / "rescued"
    afile.write_text("not a directory\n")
    to = afile / under if under else afile
    done = subprocess.run(
        [sys.executable, "-m", "mrs", "journal", "salvage", "--data-dir", str(bus.data_dir),
         "--to", str(to)],
        capture_output=True, text=True, cwd=ROOT, timeout=WAIT_S,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    [line] = done.stderr.splitlines()
    assert line.startswith("mrs journal salvage: --to ") and "not a directory" in line, line
    assert afile.read_text() == "not a directory\n" and done.stdout == ""


# ------------------------------------------- re-scans: left records once, new ones found
async def _rescan_run(bus, seen_max: int) -> tuple[int, list[dict], int]:
    """A WAIT(3) handler over two IGNOREd records; once it has left both, a new
    record lands in the DLJ with a seq before theirs (a live put of group 1, whose
    seqs are below the replayed ones). (exit code, its JSON lines, the new seq)."""
    path = bus.config_path.parent / "rescan.rules"
    path.write_text(LEFT_THEN_CAUGHT.format(wait="WAIT(3)"))
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path)]
    command += ["--group", "1", "--address", bus.address, "--json"]
    command += ["--seen-max", str(seen_max), str(path)]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, cwd=ROOT)
    assert process.stdout is not None
    lines: list[dict] = []
    buffer = bytearray()
    with trio.fail_after(WAIT_S):
        while sum(line.get("outcome") == "left" for line in lines) < 2:
            lines.append(json.loads(await _read_line(process.stdout, buffer)))
        async with bus.connect(queue="SENDER") as sender:
            psb = await sender.put(
                b"late", target="1.50", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
            )
            assert psb.uma_status == Status.DLJ_SUCCESS and psb.seq < record(1).seq, psb
        while line := await _read_line(process.stdout, buffer):
            lines.append(json.loads(line))
        return await process.wait(), lines, psb.seq


async def test_dlj_rescans_pass_over_left_records_and_find_new_ones(replay_bus) -> None:
    """A record left is reported once, though the DLJ is re-scanned every idle
    second (it is not held, so the run remembers it), and a record that lands
    before the scan position is found by the next re-scan and forwarded."""
    bus = replay_bus({Journal.DLJ: _records(2, 0)})
    code, lines, late = await _rescan_run(bus, seen_max=2)
    assert code == 0, lines
    events = [(line["seq"], line["outcome"]) for line in lines if "seq" in line]
    left = [(record(1).seq, "left"), (record(2).seq, "left")]
    assert sorted(events[:2]) == left and events[2:] == [(late, "forwarded")], events
    assert not [line for line in lines if "not looked at" in line.get("note", "")], lines
    assert _dlj_seqs(bus.data_dir / "journals") == {record(1).seq, record(2).seq}


async def test_dlj_left_records_beyond_seen_max_are_not_looked_at_again(replay_bus) -> None:
    """Memory stays bounded: the run remembers at most --seen-max records it left.
    Past that it no longer re-scans from the start (each poll would look at, and
    report, the records it forgot again), says so once, and leaves a record that
    lands before its scan position for the next run."""
    bus = replay_bus({Journal.DLJ: _records(2, 0)})
    code, lines, late = await _rescan_run(bus, seen_max=1)
    assert code == 0, lines
    events = [(line["seq"], line["outcome"]) for line in lines if "seq" in line]
    assert sorted(events) == [(record(1).seq, "left"), (record(2).seq, "left")], events
    [note] = [line["note"] for line in lines if "re-scans" in line.get("note", "")]
    assert note.startswith("more than 1 records are left in the DLJ (--seen-max)"), note
    assert _dlj_seqs(bus.data_dir / "journals") == {record(1).seq, record(2).seq, late}


async def test_dlj_takers_waiting_for_room_wake_when_a_record_leaves(replay_bus) -> None:
    """Why: a taker waiting for room in the record looked again only once a second
    (DLQ_HANDLER_POLL_S), so a DLJ of 40 records the table leaves, worked with
    `--seen-max 1`, took some 40 s where a fraction of one does. A letter that
    leaves the record wakes them."""
    bus = replay_bus({Journal.DLJ: _records(40, 0)})
    started = trio.current_time()
    code, lines, stderr = await _run_cli(
        bus, LEFT_THEN_CAUGHT.format(wait="WAIT(NO)"), "--seen-max", "1"
    )
    took_s = trio.current_time() - started
    assert code == 0 and lines[-1]["summary"]["ignored"] == 40, (lines, stderr)
    assert took_s < 20.0, took_s
