"""Probes of the journal tools as an operator runs them at 3 a.m. on a live group: a
narrow `mrs jplay` killed and run again to its end, and `mrs dlq-handler` whose report
is piped to a reader that goes away. Each test says what was wrong before its fix."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import trio

from clients import DeliveryMode, Status, Uma, connect
from journals import Journal
from tests.client_helpers import take_all
from tests.journal_helpers import record
from tests.process.test_dlq_jplay_probes_20 import replay_killed_mid_run
from tests.process.test_jplay import jplay, replayed_seqs

WAIT_S = 30.0
"""Deadline for what another process must do, on a loaded 2-core machine."""


async def test_a_narrow_replay_killed_then_run_again_to_its_end_settles_its_doubt(
    replay_bus,
) -> None:
    """`mrs jplay pcj --target 1.21` SIGKILLed mid-run, then run again to its end (as
    its summary advises): every record it left in doubt was sent again, yet the scope
    stayed in doubt, since only a run over the whole journal settled it. A replay with
    another `--as` stayed refused, and the refusal's way out (`run mrs jplay pcj again
    with --as 1.20`) replayed every PCJ record, also those the operator had kept out.
    Now the refusal names the selection to finish, and the same command run to its end
    settles it: the other replay runs, and each record arrives once."""
    count = 150
    kept_out = [record(1000 + index, target_queue=10) for index in range(5)]
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(count)] + kept_out})
    narrow = ("pcj", "--target", "1.21")
    async with connect(bus.address, queue="RESTORE") as receiver:
        received: list = []
        async with trio.open_nursery() as nursery:
            receiving = await replay_killed_mid_run(bus, receiver, received, nursery, narrow)
            refused, _, err = await jplay(bus, "pcj", "--as", "SENDER2", "--to", "RESTORE")
            finished, _, _ = await jplay(bus, *narrow)
            other, summary, other_err = await jplay(
                bus, "pcj", "--target", "1.10", "--as", "SENDER2", "--to", "RESTORE", "--json"
            )
            receiving.cancel()
        received += await take_all(receiver)
    assert refused == 1 and err.count("\n") == 1, err
    assert "run mrs jplay pcj again with --as 1.20 --target 1.21 --until " in err, err
    assert finished == 0
    assert other == 0 and summary["sent"] == len(kept_out), other_err
    wanted = [record(i).seq for i in range(count)] + [item.seq for item in kept_out]
    assert Counter(replayed_seqs(received)) == Counter(wanted)


async def test_a_dlq_handler_whose_report_reader_goes_away_says_so_and_exits_141(
    bus, tmp_path: Path
) -> None:
    """`mrs dlq-handler ... | head -1` (or a log shipper that died): the handler stopped
    at its next report line and exited 0, "ended normally, nothing more to do", with
    the letters left on the DLQ unsaid (its BrokenPipeError was taken for a lost
    connection, whose note hit the closed pipe again). Now it says in one line why it
    stopped and exits 141 (128 + SIGPIPE); every letter is on the DLQ or forwarded, once."""
    count = 40
    async with bus.connect(queue="SENDER") as sender:
        for index in range(count):  # 1.50 has no queue: each is a dead letter
            psb = await sender.put(
                b"letter %02d" % index, target="1.50", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ
            )
            assert psb.uma_status == Status.DLQ_SUCCESS, psb
    rules = tmp_path / "fwd.rules"
    rules.write_text("WAIT(NO)\nACTION(FWD) FWDQ(ANYORDER)\n")
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path)]
    command += ["--group", "1", "--address", bus.address, "--json", "--window", "1", str(rules)]
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    with trio.fail_after(WAIT_S):
        first = b""
        while b"\n" not in first:
            first += await process.stdout.receive_some()
        await process.stdout.aclose()  # the reader had enough
        err = b""
        while chunk := await process.stderr.receive_some():
            err += chunk
        code = await process.wait()
    text = err.decode().strip()
    assert code == 128 + signal.SIGPIPE, text
    assert "\n" not in text and "reader of its report went away" in text, text
    async with bus.connect(queue="ANYORDER") as forwarded, bus.connect(queue="DLQ") as dlq:
        bodies = [m.body for m in await take_all(forwarded) + await take_all(dlq)]
    assert sorted(bodies) == [b"letter %02d" % i for i in range(count)]
