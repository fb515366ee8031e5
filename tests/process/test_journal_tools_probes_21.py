"""Probes of the journal tools as an operator runs them at 3 a.m.: `mrs jplay`
stopped by SIGTERM when started in the background of a script (SIGINT ignored), a
stopped `--again` run run again as its summary advises, a mistyped `--address`;
`mrs journal salvage` running out of disk. Each test says what was wrong before its
fix."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from clients import connect
from journals import Journal
from mrs.tools.journal.ledger import LEDGER_DIRNAME, ReplayLedger
from tests.cli_helpers import run_mrs
from tests.client_helpers import take_all
from tests.journal_helpers import journal_seqs, record, stopped_bus, write_records
from tests.process.test_jplay import jplay, jplay_command, receive_confirming, replayed_seqs

WAIT_S = 30.0
"""Deadline for what another process must do, on a loaded 2-core machine."""
COUNT = 200


async def _read_all(stream: trio.abc.ReceiveStream) -> bytes:
    data = bytearray()
    while chunk := await stream.receive_some():
        data.extend(chunk)
    return bytes(data)


async def _stopped_replay(
    bus, receiver, received: list, command: list[str], stderr_path: Path, enough_count: int
) -> tuple[int, dict]:
    """Run `command` (a jplay with --json), SIGTERM it once `enough_count` messages
    came to `receiver`; (exit status, its JSON summary). Its stderr goes to a file,
    so however much it writes it never blocks on a pipe."""
    enough = trio.Event()
    async with trio.open_nursery() as nursery:
        receiving = await nursery.start(
            receive_confirming, receiver, received, enough, enough_count
        )
        with stderr_path.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                command, stdout=subprocess.PIPE, stderr=stderr
            )
        with trio.fail_after(WAIT_S):
            await enough.wait()
            process.send_signal(signal.SIGTERM)
            out = await _read_all(process.stdout)
            status = await process.wait()
        receiving.cancel()
    return status, json.loads(out)


async def test_sigterm_with_sigint_ignored_stops_jplay_cleanly_and_counts_each_record(
    replay_bus, tmp_path: Path
) -> None:
    """A shell script's background job runs with SIGINT ignored. `mrs jplay` started
    so and stopped by SIGTERM (`kill %1`) raised KeyboardInterrupt wherever its code
    was: trio abandoned the run and printed pages of "Exception ignored" tracebacks,
    and the summary counted neither the records the workers held nor those planned
    (`selected 928, sent 40, failed 0`, no "not attempted"). Now the stop cancels the
    replay in trio: exit 143, no traceback, every record counted, and the same
    command run again delivers each record once."""
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(COUNT)]})
    background = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]
    command = background + jplay_command(bus, "pcj", "--rate", "40/s", "--json")
    received: list = []
    async with connect(bus.address, queue="RESTORE") as receiver:
        status, first = await _stopped_replay(
            bus, receiver, received, command, tmp_path / "stderr", 20
        )
        code, again, _ = await jplay(bus, "pcj", "--json")
        received += await take_all(receiver)
    stderr = (tmp_path / "stderr").read_text()
    assert status == 128 + signal.SIGTERM, stderr[-2000:]
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-2000:]
    assert first["stopped"] == "interrupted (SIGTERM)"
    assert first["not_attempted"] > 0
    assert first["sent"] + first["failed"] + first["not_attempted"] == COUNT
    assert code == 0 and again["sent"] + again["skipped"] == COUNT
    assert Counter(replayed_seqs(received)) == Counter(record(i).seq for i in range(COUNT))


async def test_a_stopped_again_run_run_again_replays_each_record_once_more(
    replay_bus, tmp_path: Path
) -> None:
    """`--again` replays each record once more, under a new generation. Stopped, its
    summary says "Run the same command again to resume: records stored are skipped";
    but the run again took every record the stopped run had replayed for one replayed
    before the round and sent it a third time (generation 3). Now an `--again` run
    that did not finish is continued by the next: each record comes once per round."""
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(COUNT)]})
    received: list = []
    async with connect(bus.address, queue="RESTORE") as receiver:
        code, first, _ = await jplay(bus, "pcj", "--json")
        assert code == 0 and first["sent"] == COUNT
        command = jplay_command(bus, "pcj", "--again", "--rate", "40/s", "--json")
        status, stopped = await _stopped_replay(
            bus, receiver, received, command, tmp_path / "stderr", COUNT + 20
        )
        code, again, _ = await jplay(bus, "pcj", "--again", "--json")
        received += await take_all(receiver)
    assert status == 128 + signal.SIGTERM
    assert stopped["sent"] > 0 and stopped["not_attempted"] > 0
    assert code == 0 and again["skipped"] >= stopped["sent"]
    rounds = Counter(
        (message.headers["replay"]["seq"], message.headers["replay"]["generation"])
        for message in received
    )
    expected = {(record(i).seq, generation): 1 for i in range(COUNT) for generation in (1, 2)}
    assert rounds == Counter(expected)
    code, plan, _ = await jplay(bus, "pcj", "--again", "--dry-run", "--json")
    assert code == 0 and plan["would_send"] == COUNT  # the round is over: a new one may start


@pytest.mark.parametrize("address", ["nothost", "127.0.0.1:0", ":7001"])
def test_a_malformed_address_is_bad_usage_before_anything_is_read(
    tmp_path: Path, address: str
) -> None:
    """`--address nothost` (a port forgotten) reached the client only when the replay
    connected: exit 1, every record "not attempted", "stopped: BADPARAM" and the advice
    to run the same command again, which would fail the same way. Now it is bad usage:
    one line, exit 2."""
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(i) for i in range(3)])
    result = run_mrs(
        "jplay", "--config", str(bus.config_path), "--group", "1", "pcj", "--address", address
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"mrs jplay: --address {address!r}"), result.stderr
    assert len(result.stderr.splitlines()) == 1


def _file_size_capped(size_bytes: int) -> Callable[[], None]:
    """For a child: files it writes stop growing at `size_bytes` (RLIMIT_FSIZE), as
    a disk that fills up would stop them (Python ignores SIGXFSZ: writes fail)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size_bytes, size_bytes))

    return cap


def test_a_salvage_stopped_by_a_full_disk_leaves_no_journals_that_verify_intact(
    tmp_path: Path,
) -> None:
    """A salvage that ran out of disk part way ended with "unexpected error:
    JournalDeviceError" and left DIR/journals holding the batches it had committed,
    and `mrs journal verify --data-dir DIR` said it was intact: the documented next
    step moves it in, and the group starts on part of its messages. Now it says in
    one line that it could not write the copy, leaves no journals there, and the same
    command run again with room copies every record."""
    data_dir = tmp_path / "g1"
    records = [record(i, body=b"x" * 200) for i in range(15_000)]
    write_records(data_dir / "journals", Journal.PCJ, records)
    rescued = tmp_path / "rescued"
    command = [sys.executable, "-m", "mrs", "journal", "salvage", "--data-dir", str(data_dir)]
    command += ["--to", str(rescued)]
    full = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_file_size_capped(1_500_000),
    )
    assert full.returncode == 1, full.stderr
    assert full.stderr.startswith(f"mrs journal salvage: cannot write the copy in {rescued}")
    assert len(full.stderr.splitlines()) == 1, full.stderr
    assert not (rescued / "journals").exists()
    again = run_mrs(*command[3:])
    assert again.returncode == 0, again.stderr
    assert journal_seqs(rescued / "journals", Journal.PCJ) == [item.seq for item in records]


@pytest.mark.parametrize(
    "command", [["journal", "verify"], ["dump", "pcj"]], ids=["verify", "dump"]
)
def test_jplays_ledger_named_as_a_data_directory_is_said_to_be_one(
    tmp_path: Path, command: list[str]
) -> None:
    """`--data-dir g1/replay-ledger` (the LMDB environment beside `journals/`) was read
    as a group's journals: `mrs journal verify` reported thousands of corrupt records,
    exit 1, and sent the operator to salvage a group that is whole. Now one line says
    what the directory is and which one to give."""
    data_dir = tmp_path / "g1"
    write_records(data_dir / "journals", Journal.PCJ, [record(i) for i in range(3)])
    ReplayLedger(data_dir).close()  # what a first jplay leaves
    ledger = data_dir / LEDGER_DIRNAME
    assert (ledger / "data.mdb").exists()
    result = run_mrs(*command, "--data-dir", str(ledger))
    assert result.returncode != 0
    (line,) = result.stderr.splitlines()
    assert line.startswith("mrs ") and line.endswith(
        f": {ledger} is jplay's replay ledger, not a group's journals: give "
        f"--data-dir {data_dir.resolve()}"
    ), line
    assert run_mrs(*command, "--data-dir", str(data_dir)).returncode == 0
