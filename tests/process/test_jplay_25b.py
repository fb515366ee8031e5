"""`mrs jplay` as an operator runs it against a real group (`mrs serve`, messages really
confirmed into the PCJ and really dead-lettered into the DLJ): a replay into a full
queue under a UMA that puts the refused replay somewhere else, and a corrupt record in
the middle of the selection."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, connect
from journals import Journal, seq_key
from mrs.tools.cli import main
from tests.client_helpers import take_all
from tests.journal_helpers import (
    REPLAY_QUEUES,
    SEQ_BASE,
    journal_seqs,
    record,
    stopped_bus,
    write_raw,
    write_records,
)


async def _jplay(bus, *args: str) -> tuple[int, dict, str]:
    """`mrs jplay ... --json` to the end: (exit status, summary, stderr)."""
    command = [
        sys.executable, "-m", "mrs", "jplay", "--config", str(bus.config_path), "--group", "1",
        "--address", bus.address, *args, "--json",
    ]  # fmt: skip
    done = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    out = done.stdout.decode()
    return done.returncode, (json.loads(out) if out.strip() else {}), done.stderr.decode()


async def _confirmed_into_the_pcj(bus, count: int) -> None:
    """`count` orders put to ORDERS and confirmed there (pcj_default: into the PCJ)."""
    async with connect(bus.address, queue="SENDER") as sender:
        for index in range(count):
            await sender.put(f"order {index}".encode(), "ORDERS", delivery=DeliveryMode.WF_DQF)
    async with connect(bus.address, queue="ORDERS") as receiver:
        assert len(await take_all(receiver)) == count


async def _fill_the_dqf(bus, room: int) -> None:
    """`room` messages into ANYORDER, unread: a DQF of `room` records is then full."""
    async with connect(bus.address, queue="SENDER") as sender:
        for index in range(room):
            psb = await sender.put(b"filler %d" % index, "ANYORDER", delivery=DeliveryMode.WF_DQF)
            assert psb.delivery_status == Status.STORED


# ---------------------------------------------------------------- a full queue, a UMA
@pytest.mark.parametrize("uma", ["DLJ", "DLQ", "RTS"])
async def test_a_uma_that_would_keep_a_copy_of_each_failed_replay_is_refused(
    make_bus, uma: str
) -> None:
    """Why: a replay into a full DQF under --uma DLJ was answered DQF_FULL / DLJ_SUCCESS,
    reported failed, its PCJ record left to be replayed again, and the summary said to run
    the same command again; each run wrote another copy of every record into the DLJ (on
    the DLQ with DLQ, back on the replay queue with RTS), and a later redrive of the DLJ
    delivered each order once per run, beside the copy the last run stored."""
    bus = make_bus(
        group_extra="pcj_default = true", limits="dqf_messages_max = 3", queues=REPLAY_QUEUES
    )
    await _confirmed_into_the_pcj(bus, 3)
    await _fill_the_dqf(bus, 3)
    for _run in range(2):  # "run the same command again"
        code, summary, err = await _jplay(bus, "pcj", "--uma", uma)
        assert code == 2 and summary == {}, err
        assert f"--uma {uma}" in err and "each run" in err and "Traceback" not in err
    assert journal_seqs(bus.data_dir / "journals", Journal.DLJ) == []
    async with connect(bus.address, queue="REPLAY") as replay_queue:
        assert await take_all(replay_queue) == []
    assert not (bus.data_dir / "replay-ledger").exists(), "refused before anything was written"


async def test_a_replay_into_a_full_queue_is_reported_failed_and_the_next_run_delivers_it_once(
    make_bus,
) -> None:
    """The default UMA (DISC): refused replays are reported DQF_FULL, their records stay,
    nothing lands anywhere else; once the queue has room the same command delivers each
    record once."""
    bus = make_bus(
        group_extra="pcj_default = true", limits="dqf_messages_max = 3", queues=REPLAY_QUEUES
    )
    await _confirmed_into_the_pcj(bus, 3)
    await _fill_the_dqf(bus, 3)
    code, summary, _err = await _jplay(bus, "pcj", "--target", "ORDERS", "--to", "RESTORE")
    assert code == 1 and summary["failed"] == 3 and summary["statuses"] == {"DQF_FULL": 3}
    assert summary["resumable"] is True
    assert journal_seqs(bus.data_dir / "journals", Journal.DLJ) == []
    async with connect(bus.address, queue="ANYORDER") as receiver:
        assert len(await take_all(receiver)) == 3  # room again
    code, summary, _err = await _jplay(bus, "pcj", "--target", "ORDERS", "--to", "RESTORE")
    assert code == 0 and summary["sent"] == 3, (summary, _err)
    async with connect(bus.address, queue="RESTORE") as restore:
        replayed = await take_all(restore)
    assert sorted(m.body for m in replayed) == [b"order 0", b"order 1", b"order 2"]


def test_the_refusal_comes_before_any_journal_is_read(tmp_path: Path, capsys) -> None:
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.DLJ, [record(1)])
    code = main(["jplay", "--config", str(bus.config_path), "--group", "1", "dlj", "--uma", "DLQ"])
    assert code == 2 and "--uma DLQ" in capsys.readouterr().err
    for uma in ("DISC", "DISCL", "SAF"):  # kept: no copy of a failed replay stays anywhere
        code = main(
            ["jplay", "--config", str(bus.config_path), "--group", "1", "dlj", "--uma", uma,
             "--dry-run", "--json"]
        )  # fmt: skip
        assert code == 0, capsys.readouterr().err


# ---------------------------------------------------------------- a corrupt record
async def test_a_corrupt_record_in_the_middle_is_skipped_with_a_line_and_fails_the_run(
    tmp_path: Path, started_buses: list
) -> None:
    """Why: a replay that met a corrupt record ended with exit status 0, "every selected
    record is replayed", so `mrs jplay ... && <restore done>` went on without one of
    them; `mrs dump` of the same journal exits 1. Now 1, with the way to repair, and a
    re-run (which meets it again) sends nothing twice."""
    bus = stopped_bus(tmp_path / "bus")
    journals = bus.data_dir / "journals"
    write_records(journals, Journal.PCJ, [record(i, target_queue=21) for i in (0, 1, 3, 4)])
    write_raw(journals, Journal.PCJ, seq_key(SEQ_BASE + 2), b"\x4d\x01junk")
    bus.start()
    started_buses.append(bus)
    for run in range(2):
        code, summary, err = await _jplay(bus, "pcj", "--seq", f"{SEQ_BASE}..{SEQ_BASE + 4}")
        assert code == 1, err
        assert summary["corrupt"] == 1 and summary["failed"] == 0
        assert (summary["sent"], summary["skipped"]) == ((4, 0) if run == 0 else (0, 4))
        assert summary["resumable"] is False  # a re-run meets the same record
        assert f"(seq {SEQ_BASE + 2}); not replayed" in err  # the seq --seq takes
    code, _summary, err = await _jplay(bus, "pcj", "--seq", f"{SEQ_BASE + 3}..")
    assert code == 0, err  # a selection without it
    async with connect(bus.address, queue="RESTORE") as receiver:
        messages = await take_all(receiver)
    seqs = Counter(message.headers["replay"]["seq"] for message in messages)
    assert seqs == Counter(SEQ_BASE + i for i in (0, 1, 3, 4))


async def test_the_summary_of_a_run_with_a_corrupt_record_points_to_the_repair(
    tmp_path: Path, started_buses: list
) -> None:
    bus = stopped_bus(tmp_path / "bus")
    journals = bus.data_dir / "journals"
    write_records(journals, Journal.DLJ, [record(0, target_queue=21, reason=-228)])
    write_raw(journals, Journal.DLJ, seq_key(SEQ_BASE + 1), b"\x4d\x01junk")
    bus.start()
    started_buses.append(bus)
    command = [
        sys.executable, "-m", "mrs", "jplay", "--config", str(bus.config_path), "--group", "1",
        "--address", bus.address, "dlj",
    ]  # fmt: skip
    done = await trio.run_process(command, capture_stderr=True, capture_stdout=True, check=False)
    err = done.stderr.decode()
    assert done.returncode == 1
    assert "corrupt 1 (never replayed)" in err and "mrs journal salvage" in err
    assert "Run the same command again" not in err
