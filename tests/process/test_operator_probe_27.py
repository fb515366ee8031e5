"""The journal tools as an operator runs them at 3 a.m. from the docs (journal-tools.md):
a PCJ replay to the queues whose receivers confirm into that same PCJ, stopped part way
and run again; `--as` naming a queue the group lacks, or its dead letter queue."""

from __future__ import annotations

import pytest

from clients import DeliveryMode, connect
from journals import Journal
from tests.client_helpers import take_all
from tests.journal_helpers import (
    REPLAY_QUEUES,
    journal_seqs,
    mrs,
    record,
    stopped_bus,
    write_records,
)
from tests.process.test_jplay_25b import _jplay


async def _confirm_all(bus, queue: str) -> list:
    """Everything waiting on `queue`, taken and confirmed (pcj_default: into the PCJ)."""
    async with connect(bus.address, queue=queue) as receiver:
        return await take_all(receiver)


async def test_a_rerun_does_not_send_again_the_copies_the_first_run_had_confirmed(
    make_bus,
) -> None:
    """Why: a replay of the PCJ to its original target (the default), whose receiver
    confirms into the same PCJ, added one PCJ record per copy. Run again after a stop
    ("Interrupted? Run step 3 again: it resumes and sends nothing twice"), the same
    selection (`--target ORDERS --since 1h`, no --until) took those copies for new
    records and sent each again under a new key: every order replayed before the stop
    reached ORDERS twice (seen with a SIGTERM mid-run: 1,625 messages for 1,000 orders)."""
    bus = make_bus(group_extra="pcj_default = true", queues=REPLAY_QUEUES)
    orders = 12
    async with connect(bus.address, queue="SENDER") as sender:
        for index in range(orders):
            await sender.put(b"order %d" % index, "ORDERS", delivery=DeliveryMode.WF_DQF)
    assert len(await _confirm_all(bus, "ORDERS")) == orders
    originals = journal_seqs(bus.data_dir / "journals", Journal.PCJ)
    # The first run stops after 5 (as after Ctrl-C); its copies are confirmed meanwhile.
    selection = ("pcj", "--target", "ORDERS", "--since", "1h")
    code, first, err = await _jplay(bus, *selection, "--limit", "5")
    assert code == 0 and first["sent"] == 5, err
    copies = await _confirm_all(bus, "ORDERS")
    assert [m.headers["replay"]["seq"] for m in copies] == originals[:5]
    code, second, err = await _jplay(bus, *selection)
    assert code == 0, err
    assert second["sent"] == orders - 5, second
    assert (second["skipped"], second["copies"]) == (5, 5), second
    rest = await _confirm_all(bus, "ORDERS")
    assert [m.headers["replay"]["seq"] for m in rest] == originals[5:]
    assert all("previous" not in m.headers["replay"] for m in rest)
    # --again still replays every original once more, and none of the copies.
    code, again, err = await _jplay(bus, *selection, "--again")
    assert code == 0 and again["sent"] == orders and again["copies"] == orders, (again, err)
    assert [m.headers["replay"]["seq"] for m in await _confirm_all(bus, "ORDERS")] == originals


@pytest.mark.parametrize(
    ("sender", "said"),
    [("1.999", "has no queue 999"), ("DLQ", "dead letter queue"), ("96", "dead letter queue")],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_as_a_queue_the_group_lacks_or_its_dlq_is_refused_up_front(
    tmp_path, sender: str, said: str, dry_run: bool
) -> None:
    """Why: `--as 1.999` was attached to only when the run began: refused there as a stop
    (exit 1, every record "not attempted", and "Run the same command again to resume",
    which no re-run could change); a dry run planned it as fine. `--as DLQ` replayed
    every record from the dead letter queue, so an answer to a replay landed there
    without a dead-letter header, never matched by mrs dlq-handler."""
    bus = stopped_bus(tmp_path)
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1), record(2)])
    done = mrs(
        "jplay", "--config", str(bus.config_path), "--group", "1", "--address", "127.0.0.1:9",
        "pcj", "--as", sender, *(["--dry-run"] if dry_run else []),
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mrs jplay: --as {sender}: "), lines
    assert said in lines[0] and "Traceback" not in done.stderr
