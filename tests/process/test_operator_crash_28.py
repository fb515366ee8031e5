"""The two redrives of a DLJ, `mrs jplay dlj --remove` and `mrs dlq-handler` with
INPUTQ(DLJ), each SIGKILLed mid-run and finished by the other tool, against real
processes: every dead letter arrives, and a second copy of one is marked POSSDUPL.
Each tool alone was finished exactly by its own next run; finished by the other one,
the records in doubt came twice, the second copy unmarked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import defaultdict

import trio

from clients import Status, connect
from journals import Journal
from tests.client_helpers import take_all
from tests.journal_helpers import journal_seqs, record
from tests.process.test_dlq_handler import _handler_command
from tests.process.test_jplay import jplay_command

RECORDS = 40
WAIT_S = 120


def _dead_letters() -> list:
    """DLJ records bound for RESTORE (1.21), refused DQF_FULL once."""
    return [
        record(index, target_queue=21, body=b"order %03d" % index, reason=int(Status.DQF_FULL))
        for index in range(RECORDS)
    ]


def _jplay(bus, *extra: str) -> list[str]:
    return jplay_command(bus, "dlj", "--remove", "--json", *extra)


async def _until_waiting(bus, count: int) -> None:
    """Until RESTORE holds `count` messages (the first tool's puts stored)."""
    async with connect(bus.address, None) as client:
        while (await client.pending(["RESTORE"]))[0] < count:
            await trio.sleep(0.005)  # polling the server's counts: no event to await


async def _received(bus) -> dict[bytes, list]:
    """Every message on RESTORE, confirmed, by body."""
    async with connect(bus.address, "RESTORE") as receiver:
        messages = await take_all(receiver)
    by_body: dict[bytes, list] = defaultdict(list)
    for message in messages:
        by_body[message.body].append(message)
    return by_body


def _retry_rules(tmp_path):
    rules = tmp_path / "dlj.rules"
    rules.write_text("INPUTQ(DLJ) WAIT(NO)\nACTION(RETRY)\n")
    return rules


async def test_a_killed_replay_finished_by_the_handler_marks_its_repeats(
    replay_bus, tmp_path
) -> None:
    """jplay --remove SIGKILLed after its first put was stored: its ledger's last
    outcomes and removals never made it, so some of its copies are stored with their
    dead letters still in the DLJ. The handler run next puts each of those again under
    its own key: it says so, and marks every put while the replay is in doubt."""
    bus = replay_bus({Journal.DLJ: _dead_letters()})
    # 20/s: the run is still going when its first put is seen stored
    replay = subprocess.Popen(
        _jplay(bus, "--rate", "20/s"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    with trio.fail_after(WAIT_S):
        await _until_waiting(bus, 1)
    replay.send_signal(signal.SIGKILL)
    replay.wait()
    handler = _handler_command(bus, _retry_rules(tmp_path))
    done = subprocess.run(handler, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    notes = [line["note"] for line in map(json.loads, done.stdout.splitlines()) if "note" in line]
    assert any("mrs jplay" in note and "in doubt" in note for note in notes), notes
    by_body = await _received(bus)
    assert sorted(by_body) == [b"order %03d" % index for index in range(RECORDS)]
    handler_copies = [m for ms in by_body.values() for m in ms if "replay" not in (m.headers or {})]
    assert handler_copies, "the handler put what the killed replay left"
    assert all(m.delivery_status == Status.POSSDUPL for m in handler_copies)
    for copies in by_body.values():  # at most one unmarked copy of each
        assert sum(m.delivery_status != Status.POSSDUPL for m in copies) <= 1
    assert journal_seqs(bus.data_dir / "journals", Journal.DLJ) == []


async def test_a_killed_handler_finished_by_jplay_marks_the_repeat(replay_bus, tmp_path) -> None:
    """The handler SIGKILLed between its put (stored) and the record's removal (its
    DLJ commits slowed by the fault file): the record stays with its attempt mark.
    `mrs jplay dlj --remove` run next puts it again under its own key, marked."""
    bus = replay_bus({Journal.DLJ: _dead_letters()})
    fault = tmp_path / "handler-fault"
    fault.write_text("SLOW 5")  # each mark and removal of the handler takes 5 s
    handler = subprocess.Popen(
        _handler_command(bus, _retry_rules(tmp_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MRS_FAULT_FILE": str(fault)},
    )
    with trio.fail_after(WAIT_S):
        await _until_waiting(bus, 1)  # stored; its removal now takes 5 s
    handler.send_signal(signal.SIGKILL)
    handler.wait()
    assert len(journal_seqs(bus.data_dir / "journals", Journal.DLJ)) == RECORDS
    done = subprocess.run(_jplay(bus), capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    by_body = await _received(bus)
    assert sorted(by_body) == [b"order %03d" % index for index in range(RECORDS)]
    [first] = [body for body, copies in by_body.items() if len(copies) > 1]
    assert first == b"order 000"
    statuses = sorted(m.delivery_status for m in by_body[first])
    assert statuses == sorted([Status.CONFIRMREQ, Status.POSSDUPL])
    assert journal_seqs(bus.data_dir / "journals", Journal.DLJ) == []
