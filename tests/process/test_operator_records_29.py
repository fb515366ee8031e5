"""What an operator's tools leave on record, against real processes: an admin purge or
move SIGKILLed right after its change was committed still has its line in the admin
journal (the line was committed after the change, and the crash left the change done
with nobody on record for it); and `mrs dlq-handler` after a `mrs jplay` stopped with
records in doubt marks its puts POSSDUPL only when that replay was of the DLJ (after
one of the PCJ it marked every dead letter it redrove a possible duplicate)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import trio

from clients import DeliveryMode, Status, connect
from journals import Journal, JournalStore
from mrs.offline.journal_files import REPLAY_LEDGER_DIRNAME
from tests.journal_helpers import journal_seqs, record
from tests.process.test_dlq_handler import _handler_command
from tests.process.test_jplay import jplay_command
from tests.process.test_operator_crash_28 import (
    _dead_letters,
    _received,
    _retry_rules,
    _until_waiting,
)

WAIT_S = 120
QUEUED = 3


async def _put_stored(address: str) -> None:
    """QUEUED recoverable messages stored on ORDERS (1.10)."""
    async with connect(address, "SENDER") as client:
        for index in range(QUEUED):
            await client.put(b"order %d" % index, "ORDERS", delivery=DeliveryMode.WF_DQF)


def _moved_on_disk(journals) -> bool:
    """Whether a moved message is stored on ANYORDER (1.11) in the journals."""
    store = JournalStore(journals, readonly=True)
    try:
        return any(item.target_queue == 11 for _key, item in store.scan(Journal.DQF))
    finally:
        store.close()


def _change_on_disk(action: str, journals) -> bool:
    if action == "purge":
        return bool(journal_seqs(journals, Journal.DLJ))
    return _moved_on_disk(journals)


async def _until_on_disk(action: str, journals) -> None:
    """Until the action's change is committed (read from the journals' files)."""
    with trio.fail_after(WAIT_S):
        while not _change_on_disk(action, journals):
            await trio.sleep(0.01)  # polling another process's files: no event to await


async def _journal_lines(address: str) -> list[dict]:
    async with connect(address, None) as operator:
        return (await operator.admin("journal", limit=50))["records"]


@pytest.mark.parametrize("action", ["purge", "move"])
def test_an_admin_action_killed_after_its_commit_is_on_record(make_bus, tmp_path, action) -> None:
    """Each commit is slowed by the fault file, so the server is SIGKILLed after the
    action's change is on disk and before anything it commits next. Before, the line
    saying who did it was committed only after the change: `mrs admin journal` after
    the restart showed the earlier refusal and no purge (or move). Now the line is in
    the change's own commit."""
    fault = tmp_path / "fault"
    bus = make_bus(env={"MRS_FAULT_FILE": str(fault)})
    trio.run(_put_stored, bus.address)
    refused = subprocess.run(  # an earlier line: the journals hold the admin journal
        [sys.executable, "-m", "mrs", "admin", "purge", "NOSUCH", "--address", bus.address],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert refused.returncode != 0
    fault.write_text("SLOW 4")  # each commit from now takes 4 s
    command = ["purge", "ORDERS"] if action == "purge" else ["move", "ORDERS", "--to", "ANYORDER"]
    operator = subprocess.Popen(
        [sys.executable, "-m", "mrs", "admin", *command, "--address", bus.address],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journals = bus.data_dir / "journals"
    trio.run(_until_on_disk, action, journals)
    bus.kill()
    operator.wait(timeout=WAIT_S)
    fault.write_text("")
    address = bus.process.start()
    assert _change_on_disk(action, journals)  # the action survived the crash...
    lines = [line for line in trio.run(_journal_lines, address) if line["action"] == action]
    done = [line for line in lines if "refused" not in line["result"]]
    assert len(done) == 1, lines  # ...and so did who did it
    assert done[0]["args"]["queue"] == "1.10" and done[0]["peer"]


# ------------------------------------------- the DLQ handler after a replay in doubt
REPLAYED = 40


def _pcj_records() -> list:
    """PCJ records bound for RESTORE (1.21), seqs apart from the dead letters'."""
    return [
        record(1000 + index, target_queue=21, body=b"pcj %03d" % index) for index in range(REPLAYED)
    ]


def _scope_journal_forgotten(bus) -> None:
    """scope.json as an earlier release wrote it: no `journal`."""
    path = bus.data_dir / REPLAY_LEDGER_DIRNAME / "scope.json"
    scope = json.loads(path.read_text())
    assert scope["in_doubt"] and scope.pop("journal") == "pcj", scope
    path.write_text(json.dumps(scope))


@pytest.mark.parametrize(
    ("replayed", "marked"),
    [
        ("dlj", True),
        ("pcj", False),
        ("pcj, by an earlier release", True),
        ("dlj, then a whole pcj", True),
    ],
)
async def test_the_handler_marks_its_puts_only_after_a_dlj_replay_in_doubt(
    replay_bus, tmp_path, replayed, marked
) -> None:
    """`mrs jplay` SIGKILLed after its first put was stored, then the handler redrives
    the DLJ. After a DLJ replay in doubt each of its puts is marked POSSDUPL (the
    replay may have sent that dead letter). After a PCJ replay in doubt none is: the
    replay sent none of them; before, every one was marked, and the note said so.
    A scope.json of an earlier release does not say which journal: marked, as before.
    Nor does a PCJ replay run to its end after the DLJ's settle the DLJ's doubt."""
    bus = replay_bus({Journal.DLJ: _dead_letters(), Journal.PCJ: _pcj_records()})
    journal = replayed.split(",")[0]
    extra = ("--remove",) if journal == "dlj" else ()
    replay = subprocess.Popen(  # 20/s: still going when its first put is seen stored
        jplay_command(bus, journal, *extra, "--rate", "20/s"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with trio.fail_after(WAIT_S):
        await _until_waiting(bus, 1)
    replay.send_signal(signal.SIGKILL)
    replay.wait()
    if replayed.endswith("earlier release"):
        _scope_journal_forgotten(bus)
    if replayed.endswith("whole pcj"):  # it settles its own records, not the DLJ's
        finished = subprocess.run(jplay_command(bus, "pcj"), capture_output=True, timeout=WAIT_S)
        assert finished.returncode == 0, finished.stderr
    handler = _handler_command(bus, _retry_rules(tmp_path))
    done = subprocess.run(handler, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    notes = [line["note"] for line in map(json.loads, done.stdout.splitlines()) if "note" in line]
    said = any("mrs jplay" in note and "in doubt" in note for note in notes)
    assert said == marked, notes
    by_body = await _received(bus)
    handler_copies = [m for ms in by_body.values() for m in ms if "replay" not in (m.headers or {})]
    assert handler_copies, "the handler redrove the dead letters"
    statuses = {m.delivery_status == Status.POSSDUPL for m in handler_copies}
    assert statuses == {marked}, [(m.body, m.delivery_status) for m in handler_copies]
