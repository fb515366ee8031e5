"""Probes of `mrs dlq-handler` and `mrs jplay` under faults: the order a destination
gets its dead letters in while the handler waits for more, SIGTERM of either command
mid-run, and two replays (or a replay and a DLJ handler) side by side on one group's
journals. Each test says what was wrong before its fix."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, Uma, connect
from journals import Journal
from tests.client_helpers import take_all
from tests.journal_helpers import record
from tests.process.test_dlq_handler import run_handler
from tests.process.test_jplay import jplay, jplay_command, receive_confirming, replayed_seqs

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0
"""Deadline for what another process must do, on a loaded 2-core machine."""


async def _dead_letters(bus, bodies: list[bytes], delivery: DeliveryMode) -> None:
    """Each body put to 1.50 (no such DQF/queue: refused) with UMA DLQ: a dead letter
    with its header, in this order on the DLQ."""
    async with bus.connect(queue="SENDER") as sender:
        for body in bodies:
            psb = await sender.put(body, target="1.50", delivery=delivery, uma=Uma.DLQ)
            assert psb.uma_status == Status.DLQ_SUCCESS, psb


def _handler_command(bus, rules: Path, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path)]
    return [*command, "--group", "1", "--address", bus.address, "--json", *extra, str(rules)]


async def _read_line(stream: trio.abc.ReceiveStream, buffer: bytearray) -> bytes:
    """The next line of a child's output (b"" at its end), read as it comes."""
    while b"\n" not in buffer:
        chunk = await stream.receive_some()
        if not chunk:
            line, buffer[:] = bytes(buffer), b""
            return line
        buffer.extend(chunk)
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


async def _read_all(stream: trio.abc.ReceiveStream, buffer: bytearray) -> bytes:
    while chunk := await stream.receive_some():
        buffer.extend(chunk)
    return bytes(buffer)


# ---------------------------------------------------------------------- dlq-handler
async def test_a_destination_gets_its_letters_in_dlq_order_while_the_handler_waits(bus) -> None:
    """With WAIT(YES) or WAIT(nnn) (the default is YES) the handler's first `window`
    takes all waited in the client's get pool, which the DLQ refuses; each was then
    sent as a single Get in the order trio resumed the takers, not the order of their
    tickets, so in about half the runs the first 32 letters were admitted, and
    forwarded to their destination, in reverse: "a destination gets its letters in
    their DLQ order" broken on every start. Five rounds: the old code passed all five
    about once in thirty runs."""
    for round_index in range(5):
        bodies = [b"%d-%02d" % (round_index, index) for index in range(40)]
        await _dead_letters(bus, bodies, DeliveryMode.WF_MEM)
        with trio.fail_after(WAIT_S):
            handler, _events = await run_handler(
                bus, "ACTION(FWD) FWDQ(ANYORDER)\n", wait_s=1, window=32
            )
        assert handler.summary()["forwarded"] == 40
        async with bus.connect(queue="ANYORDER") as target:
            arrived = [message.body for message in await take_all(target)]
        assert arrived == bodies, f"round {round_index}: not in DLQ order"


@pytest.mark.parametrize(
    "prefix",
    [[], ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]],
    ids=["foreground", "background-sigint-ignored"],
)
async def test_sigterm_stops_the_handler_with_one_line_a_summary_and_nothing_lost(
    make_bus, tmp_path, prefix: list[str]
) -> None:
    """SIGTERM (`kill`, systemd, a CI job cancelled) ended `mrs dlq-handler` at once:
    exit -15 with no summary and no word of the letters it held. Now it stops as Ctrl-C
    does, exit 143, one line on stderr, the summary last on stdout; every letter is
    still on the DLQ (none marked POSSDUPL by a put answered with no copy kept). Also
    as a script's background job, which runs with SIGINT ignored: there SIGTERM raised
    KeyboardInterrupt wherever the code was, and trio abandoned the run with tracebacks
    (mrs.offline.stop_signals)."""
    bus = make_bus(limits="dqf_messages_max = 1000")
    count = 30
    await _dead_letters(bus, [b"%02d" % index for index in range(count)], DeliveryMode.WF_DQF)
    rules = tmp_path / "retry.rules"
    rules.write_text("RETRYINT(1)\nACTION(RETRY) RETRY(100)\n")  # 1.50 refuses: it retries
    process = await trio.lowlevel.open_process(
        prefix + _handler_command(bus, rules),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    out = bytearray()
    with trio.fail_after(WAIT_S):
        first = json.loads(await _read_line(process.stdout, out))
        assert first["outcome"] == "failed"  # working, and holding the letters it took
        process.send_signal(signal.SIGTERM)
        err = await _read_all(process.stderr, bytearray())
        rest = await _read_all(process.stdout, out)
        status = await process.wait()
    assert status == 128 + signal.SIGTERM
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mrs dlq-handler: interrupted by SIGTERM")
    summary = json.loads(rest.splitlines()[-1])["summary"]
    assert summary["attempts_failed"] >= 1 and summary["retried"] == 0
    async with bus.connect(queue="DLQ") as dlq:
        left = await take_all(dlq)
    assert sorted(message.body for message in left) == [b"%02d" % i for i in range(count)]
    # every put it made was refused by 1.50, its UMA DISC keeping no copy: its letter
    # comes back as it was (mrs.group.dlq_leases `put_answered`); only one whose put
    # was still unanswered at the signal may come back POSSDUPL
    statuses = [message.delivery_status for message in left]
    assert set(statuses) <= {Status.CONFIRMREQ, Status.POSSDUPL}, statuses
    assert statuses.count(Status.CONFIRMREQ) >= count - 1, statuses


# ---------------------------------------------------------------------- jplay
async def test_sigterm_stops_jplay_with_its_summary_and_a_rerun_delivers_each_once(
    replay_bus,
) -> None:
    """SIGTERM ended `mrs jplay` at once: exit -15, no summary (nothing said of the
    records not attempted or in doubt, no advice to resume), and the ledger's last
    quarter second of outcomes unwritten. Now it stops as Ctrl-C does: exit 143 and
    the summary; the same command run again finishes with each record once."""
    count = 200
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(count)]})
    received: list = []
    enough = trio.Event()
    async with connect(bus.address, queue="RESTORE") as receiver:
        async with trio.open_nursery() as nursery:
            receiving = await nursery.start(receive_confirming, receiver, received, enough, 20)
            process = await trio.lowlevel.open_process(
                jplay_command(bus, "pcj", "--rate", "40/s", "--json"),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            with trio.fail_after(WAIT_S):
                await enough.wait()
                process.send_signal(signal.SIGTERM)
                out = await _read_all(process.stdout, bytearray())
                status = await process.wait()
            code, again, _ = await jplay(bus, "pcj", "--json")
            receiving.cancel()
        received += await take_all(receiver)
    assert status == 128 + signal.SIGTERM
    first = json.loads(out)
    assert first["stopped"] == "interrupted (SIGTERM)"
    assert first["not_attempted"] > 0
    assert first["sent"] + first["failed"] + first["not_attempted"] == count
    assert code == 0 and again["sent"] + again["skipped"] == count
    assert again["skipped"] >= first["sent"]  # the outcomes it had were written
    assert Counter(replayed_seqs(received)) == Counter(record(i).seq for i in range(count))


async def test_two_replays_of_one_data_directory_never_deliver_a_record_twice(
    replay_bus,
) -> None:
    """The server scopes an idempotency key by sender queue: a second `mrs jplay`
    started beside a running one with another `--as` put every record it selected
    again, under the same keys, and RESTORE received each record twice, neither copy
    marked. Now the second is refused with one line (exit 1) while the first runs."""
    count = 150
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(count)]})
    first_sent = trio.Event()
    async with connect(bus.address, queue="RESTORE") as receiver:
        received: list = []

        async with trio.open_nursery() as nursery:
            receiving = await nursery.start(receive_confirming, receiver, received, first_sent, 1)
            process = await trio.lowlevel.open_process(
                jplay_command(bus, "pcj", "--rate", "50/s", "--json"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            with trio.fail_after(WAIT_S):
                await first_sent.wait()  # the first replay runs and holds the ledger
            code, second, err = await jplay(bus, "pcj", "--as", "SENDER2")
            with trio.fail_after(WAIT_S * 2):
                first_status = await process.wait()
            receiving.cancel()
        received += await take_all(receiver)
    assert code == 1, err
    assert err.count("\n") == 1 and "another mrs jplay is replaying from" in err
    assert first_status == 0
    assert Counter(replayed_seqs(received)) == Counter(record(i).seq for i in range(count))


async def test_a_dlj_replay_beside_a_dlj_handler_is_refused(replay_bus, tmp_path) -> None:
    """`mrs dlq-handler` with INPUTQ(DLJ) and `mrs jplay dlj` each sent the same dead
    letters (under keys of their own), so a destination got every one twice. The
    handler holds its DLJ lock while it runs; jplay now holds it too, and says so in
    one line (exit 1) instead of sending beside it; once the handler ends it runs."""
    bus = replay_bus({Journal.DLJ: [record(i, target_queue=21, reason=-228) for i in range(3)]})
    rules = tmp_path / "dlj.rules"
    rules.write_text("INPUTQ(DLJ) WAIT(YES)\nACTION(IGNORE)\n")
    process = await trio.lowlevel.open_process(
        _handler_command(bus, rules), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT
    )
    with trio.fail_after(WAIT_S):
        first = json.loads(await _read_line(process.stdout, bytearray()))
    assert first["outcome"] == "left"  # it works the DLJ: it holds the lock
    code, _, err = await jplay(bus, "dlj", "--remove")
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(WAIT_S):
        assert await process.wait() == 128 + signal.SIGTERM
    assert code == 1 and "mrs dlq-handler is working this DLJ" in err
    code, summary, _ = await jplay(bus, "dlj", "--remove", "--json")
    assert code == 0 and summary["sent"] == 3 and summary["removed"] == 3


async def replay_killed_mid_run(
    bus, receiver, received: list, nursery, selection: tuple[str, ...] = ("pcj", "--json")
) -> trio.CancelScope:
    """Start a paced jplay (`selection`: the PCJ, all of it) and SIGKILL it once 10
    replayed messages came to `receiver` (collected, confirmed, in `received`): it
    leaves records sent with no answer. Returns the receiving task's scope, for the
    caller to cancel."""
    some = trio.Event()
    receiving = await nursery.start(receive_confirming, receiver, received, some, 10)
    process = await trio.lowlevel.open_process(  # 50/s: still going at the 10th
        jplay_command(bus, *selection, "--rate", "50/s"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with trio.fail_after(WAIT_S):
        await some.wait()
    process.kill()
    await process.wait()
    return receiving


async def test_a_replay_killed_mid_run_is_finished_in_its_own_scope(replay_bus) -> None:
    """The server scopes a replay's idempotency keys by sender queue and target. A
    jplay SIGKILLed mid-run leaves records sent with no answer; run again with another
    `--as`, it stored those a second time, neither copy marked. Now that run is
    refused in one line naming the flags that finish the first; once they have, any
    scope may replay (everything is then skipped as replayed)."""
    count = 150
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(count)]})
    async with connect(bus.address, queue="RESTORE") as receiver:
        received: list = []
        async with trio.open_nursery() as nursery:
            receiving = await replay_killed_mid_run(bus, receiver, received, nursery)
            refused, _, err = await jplay(bus, "pcj", "--as", "SENDER2")
            finished, first, _ = await jplay(bus, "pcj", "--json")
            later, second, _ = await jplay(bus, "pcj", "--as", "SENDER2", "--json")
            receiving.cancel()
        received += await take_all(receiver)
    assert refused == 1 and err.count("\n") == 1, err
    assert "left records in doubt" in err and "--as 1." in err, err
    assert finished == 0 and first["sent"] + first["skipped"] == count
    assert later == 0 and second["skipped"] == count
    assert Counter(replayed_seqs(received)) == Counter(record(i).seq for i in range(count))


async def test_a_narrower_run_in_the_same_scope_leaves_the_others_in_doubt(replay_bus) -> None:
    """After a jplay killed mid-run, a run in the same scope over fewer records
    (`--limit 1`: one already stored) had nothing in doubt of its own and marked the
    scope settled, so a run with another `--as` was let in and stored the first run's
    unanswered records a second time, unmarked. Now the scope stays in doubt while any
    record is pending."""
    count = 150
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(count)]})
    async with connect(bus.address, queue="RESTORE") as receiver:
        received: list = []
        async with trio.open_nursery() as nursery:
            receiving = await replay_killed_mid_run(bus, receiver, received, nursery)
            narrow, _, _ = await jplay(bus, "pcj", "--limit", "1")
            refused, _, err = await jplay(bus, "pcj", "--as", "SENDER2")
            finished, _, _ = await jplay(bus, "pcj")
            later, second, _ = await jplay(bus, "pcj", "--as", "SENDER2", "--json")
            receiving.cancel()
        received += await take_all(receiver)
    assert narrow == 0
    assert refused == 1 and "left records in doubt" in err, err
    assert finished == 0 and later == 0 and second["skipped"] == count
    assert Counter(replayed_seqs(received)) == Counter(record(i).seq for i in range(count))
