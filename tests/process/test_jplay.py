"""`mrs jplay` against real servers and journals: dry run, what a replay carries, the
ledger (no accidental second replay, --again), --remove, the rate cap, interruption
by SIGKILL / Ctrl-C / a server outage followed by an exactly-once resume."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, Uma, connect
from journals import Journal, JournalStore, seq_key
from mrs.config.bus import load_config
from mrs.offline.selection import filter_from_args
from mrs.tools.cli import build_parser, main
from mrs.tools.journal.replay import replay_key
from tests.client_helpers import take_all
from tests.conftest import STANDARD_QUEUES
from tests.journal_helpers import (
    REPLAY_QUEUES,
    SEQ_BASE,
    journal_seqs,
    mrs,
    record,
    stopped_bus,
    write_raw,
    write_records,
)


async def receive_confirming(
    receiver, received: list, enough: trio.Event, enough_count: int,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Get and confirm every message into `received` until cancelled (`nursery.start`
    returns the cancel scope); `enough` is set once `enough_count` have come."""
    with trio.CancelScope() as scope:
        task_status.started(scope)
        while True:
            message = await receiver.get()
            received.append(message)
            await receiver.confirm(message.seq)
            if len(received) >= enough_count:
                enough.set()


def jplay_command(bus, *args: str) -> list[str]:
    return [sys.executable, "-m", "mrs", "jplay", "--config", str(bus.config_path)] + [
        "--group",
        "1",
        "--address",
        bus.address,
        *args,
    ]


async def jplay(bus, *args: str) -> tuple[int, dict | str, str]:
    """Run jplay to the end: (exit status, JSON summary if --json else stdout, stderr)."""
    result = await trio.run_process(
        jplay_command(bus, *args), capture_stdout=True, capture_stderr=True, check=False
    )
    out = result.stdout.decode()
    return result.returncode, json.loads(out) if "--json" in args else out, result.stderr.decode()


async def drain(bus, queue: str = "RESTORE") -> list:
    """Every message waiting on `queue`, each confirmed."""
    async with connect(bus.address, queue=queue) as receiver:
        return await take_all(receiver)


def replayed_seqs(messages) -> list[int]:
    return [message.headers["replay"]["seq"] for message in messages]


# ---------------------------------------------------------------------- dry run, usage
async def test_dry_run_counts_by_target_and_reason_and_sends_nothing(replay_bus) -> None:
    dead = [
        record(i, target_queue=77 if i < 3 else 10, reason=-228 if i < 3 else -202)
        for i in range(5)
    ]
    bus = replay_bus({Journal.DLJ: dead})
    code, summary, _ = await jplay(bus, "dlj", "--dry-run", "--json", "--remove")
    assert code == 0
    assert (summary["would_send"], summary["would_skip"], summary["would_remove"]) == (5, 0, 5)
    assert summary["by_target_and_reason"] == [
        {"target": "1.10", "reason": "DQF_FULL", "records": 2},
        {"target": "1.77", "reason": "NO_DQF", "records": 3},
    ]
    code, text, _ = await jplay(bus, "dlj", "--dry-run", "--reason", "NO_DQF", "--to", "RESTORE")
    assert code == 0 and "would send 3 of 3 selected" in text and "nothing sent" in text
    assert await drain(bus, "ORDERS") == [] and await drain(bus, "RESTORE") == []
    assert journal_seqs(bus.data_dir / "journals", Journal.DLJ) == [r.seq for r in dead]
    assert not (bus.data_dir / "replay-ledger").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    "args, problem",
    [
        (["pcj", "--remove"], "--remove applies to the dlj"),
        (["pcj", "--delivery", "WF_MEM"], "recoverable WF mode"),
        (["pcj", "--delivery", "AK_DQF"], "recoverable WF mode"),
        (["pcj", "--delivery", "FAST"], "no mode"),
        (["pcj", "--uma", "BOUNCE"], "no UMA"),
        (["pcj", "--rate", "0/s"], "--rate"),
        (["pcj", "--window", "0"], "--window"),
        (["pcj", "--seq", "9..5"], "--seq: empty range"),
        (["pcj", "--to", "NOSUCH"], "no queue named 'NOSUCH'"),
        (["pcj", "--as", "SENDER"], "--address"),  # listen port 0: where is the server?
        (["dlj", "--confirm-value", "1"], "applies to the pcj"),
    ],
)
def test_bad_usage_exits_2_before_anything_is_sent(tmp_path, capsys, args, problem) -> None:
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1)])
    code = main(["jplay", "--config", str(bus.config_path), "--group", "1", *args])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and problem in err


def test_without_a_replay_queue_jplay_asks_for_as(tmp_path, capsys) -> None:
    bus = stopped_bus(tmp_path / "bus", queues=STANDARD_QUEUES)
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1)])
    code = main(["jplay", "--config", str(bus.config_path), "--group", "1", "pcj"])
    assert code == 2 and "no queue named REPLAY" in capsys.readouterr().err


# ---------------------------------------------------------------------- a replay
async def test_replay_keeps_the_message_marks_it_and_never_repeats_by_accident(
    replay_bus,
) -> None:
    originals = [
        record(i, correlation_id=f"c-{i}".encode(), extra={"headers": {"app": "billing"}})
        for i in range(6)
    ]
    for index, item in enumerate(originals):
        item.confirm_value, item.confirm_time_ns = 40 + index, item.written_time_ns
    bus = replay_bus({Journal.PCJ: originals})

    code, summary, _ = await jplay(bus, "pcj", "--to", "RESTORE", "--json")
    assert code == 0
    assert (summary["sent"], summary["skipped"], summary["failed"]) == (6, 0, 0)
    assert summary["statuses"] == {"STORED": 6}
    got = await drain(bus)
    by_priority = sorted(originals, key=lambda r: -r.priority)  # then FIFO (stable sort)
    assert [m.body for m in got] == [r.body for r in by_priority]
    for message, original in zip(got, by_priority, strict=True):
        assert str(message.source) == "1.20"  # sent from the REPLAY queue (the default --as)
        assert (message.msg_class, message.msg_type, message.priority) == (
            original.msg_class,
            original.msg_type,
            original.priority,
        )
        assert message.correlation_id == original.correlation_id
        assert message.headers["app"] == "billing"
        assert message.headers["replay"] == {
            "journal": "pcj",
            "group": 1,
            "seq": original.seq,
            "source": "1.13",
            "target": "1.10",
            "put_time_ns": original.put_time_ns,
            "confirm_value": original.confirm_value,
            "confirm_time_ns": original.confirm_time_ns,
            "generation": 1,
        }
        secret_file = bus.data_dir / "replay-ledger" / "key-secret"
        secret = bytes.fromhex(secret_file.read_text())
        key = replay_key(secret, Journal.PCJ, 1, original.seq, 1)
        assert message.headers["idempotency_key"] == key != f"replay:pcj:1:{original.seq}:1"

    code, summary, _ = await jplay(bus, "pcj", "--to", "RESTORE", "--json")
    assert code == 0 and (summary["sent"], summary["skipped"]) == (0, 6)
    assert await drain(bus) == []

    code, summary, _ = await jplay(
        bus, "pcj", "--to", "RESTORE", "--again", "--seq", f"{SEQ_BASE + 4}..", "--json"
    )
    assert code == 0 and summary["sent"] == 2
    again = await drain(bus)
    assert [m.headers["replay"]["generation"] for m in again] == [2, 2]
    assert replayed_seqs(again) == [SEQ_BASE + 5, SEQ_BASE + 4]  # priority 5, then 4


# ---------------------------------------------------------------------- the DLJ
async def test_redrive_the_dlj_after_a_full_dqf(make_bus) -> None:
    """A real outage: the DQF fills, puts with UMA DLJ dead-letter; the receiver
    catches up; jplay redrives the dead letters to their original queue and removes them."""
    bus = make_bus(limits="dqf_messages_max = 5", queues=REPLAY_QUEUES)
    async with connect(bus.address, queue="SENDER") as sender:
        for index in range(8):
            psb = await sender.put(
                f"order {index}".encode(), "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
            )
            full = index >= 5
            assert psb.delivery_status == (Status.DQF_FULL if full else Status.STORED)
    assert len(await drain(bus, "ANYORDER")) == 5
    journals = bus.data_dir / "journals"
    assert len(journal_seqs(journals, Journal.DLJ)) == 3

    code, summary, _ = await jplay(bus, "dlj", "--reason", "DQF_FULL", "--remove", "--json")
    assert code == 0 and (summary["sent"], summary["removed"]) == (3, 3)
    redriven = await drain(bus, "ANYORDER")
    assert [m.body for m in redriven] == [b"order 5", b"order 6", b"order 7"]
    assert {m.headers["replay"]["reason_name"] for m in redriven} == {"DQF_FULL"}
    assert journal_seqs(journals, Journal.DLJ) == []


async def test_a_dlj_emptied_by_remove_takes_dead_letters_again_at_its_cap(make_bus) -> None:
    """`jplay --remove` beside the server empties a DLJ that was at dlj_messages_max:
    the next puts with UMA DLJ are dead-lettered again (the group counted the DLJ
    once at start and answered DLJ_FAILED until a restart)."""
    limits = "dqf_messages_max = 2\ndlj_messages_max = 2"
    bus = make_bus(limits=limits, queues=REPLAY_QUEUES)
    journals = bus.data_dir / "journals"

    async def overfill(first: int) -> list[Status]:
        async with connect(bus.address, queue="SENDER") as sender:
            return [
                (
                    await sender.put(
                        f"order {index}".encode(),
                        "ANYORDER",
                        delivery=DeliveryMode.WF_DQF,
                        uma=Uma.DLJ,
                    )
                ).uma_status
                for index in range(first, first + 5)
            ]

    first = await overfill(0)  # 2 stored, 2 dead-lettered, the 5th finds the DLJ full
    assert first[-1] == Status.DLJ_FAILED and first[2:4].count(Status.DLJ_FAILED) == 0
    assert len(journal_seqs(journals, Journal.DLJ)) == 2
    assert len(await drain(bus, "ANYORDER")) == 2
    code, summary, _ = await jplay(bus, "dlj", "--remove", "--json")
    assert code == 0 and summary["removed"] == 2
    assert len(await drain(bus, "ANYORDER")) == 2

    again = await overfill(10)
    assert again[2:4].count(Status.DLJ_FAILED) == 0 and again[-1] == Status.DLJ_FAILED
    assert len(journal_seqs(journals, Journal.DLJ)) == 2


async def test_remove_never_removes_a_record_whose_replay_was_not_stored(replay_bus) -> None:
    dead = [record(i, target_queue=11 if i % 2 else 77, reason=-228) for i in range(8)]
    bus = replay_bus({Journal.DLJ: dead})
    journals = bus.data_dir / "journals"
    stored = [r.seq for r in dead if r.target_queue == 11]
    unstored = [r.seq for r in dead if r.target_queue == 77]

    code, summary, _ = await jplay(bus, "dlj", "--json")  # first without --remove
    assert code == 1 and (summary["sent"], summary["failed"], summary["removed"]) == (4, 4, 0)
    assert summary["statuses"] == {"STORED": 4, "NO_DQF": 4}
    assert {f["status"] for f in summary["failures"]} == {"NO_DQF"}
    assert journal_seqs(journals, Journal.DLJ) == [r.seq for r in dead]

    code, summary, _ = await jplay(bus, "dlj", "--remove", "--json")
    assert code == 1
    assert (summary["sent"], summary["skipped"], summary["failed"]) == (0, 4, 4)
    assert summary["removed"] == 4  # acknowledged in the first run: now removed, not resent
    assert journal_seqs(journals, Journal.DLJ) == unstored
    assert sorted(replayed_seqs(await drain(bus, "ANYORDER"))) == stored

    code, summary, _ = await jplay(bus, "dlj", "--remove", "--json")
    assert code == 1 and (summary["selected"], summary["failed"], summary["removed"]) == (4, 4, 0)
    assert journal_seqs(journals, Journal.DLJ) == unstored


async def test_corrupt_and_unsendable_records_are_reported_and_the_rest_replayed(
    tmp_path,
) -> None:
    records = [record(i) for i in range(5)]
    records[2].priority = 150  # the wire format allows 0..99: refused before it leaves
    bus = stopped_bus(tmp_path / "damaged")
    write_records(bus.data_dir / "journals", Journal.PCJ, records)
    write_raw(bus.data_dir / "journals", Journal.PCJ, seq_key(SEQ_BASE + 3), b"\x4d\x01junk")
    bus.start()
    try:
        code, summary, err = await jplay(bus, "pcj", "--to", "RESTORE", "--json")
        assert code == 1
        assert (summary["selected"], summary["sent"], summary["failed"]) == (4, 3, 1)
        assert summary["corrupt"] == 1
        assert summary["failures"][0]["status"] == "REFUSED_LOCALLY"
        assert "corrupt record in pcj" in err
        assert sorted(replayed_seqs(await drain(bus))) == [SEQ_BASE + i for i in (0, 1, 4)]
    finally:
        bus.process.terminate()


# ---------------------------------------------------------------------- rate
def sends_per_s(times_s: list[float]) -> float:
    """The rate of a paced stream of events: 1 / the least-squares slope of time
    against index. Every event weighs in, so one late first or last event (a loaded
    machine) moves it little, where (n - 1) / (last - first) would swing by 10%."""
    count = len(times_s)
    mean_index, mean_time = (count - 1) / 2, sum(times_s) / count
    covariance = sum((index - mean_index) * (t - mean_time) for index, t in enumerate(times_s))
    variance = sum((index - mean_index) ** 2 for index in range(count))
    return variance / covariance


def test_sends_per_s_reads_a_paced_stream_and_shrugs_off_one_late_end() -> None:
    paced = [index / 100 for index in range(101)]
    assert sends_per_s(paced) == pytest.approx(100)
    late_start = [0.1] + paced[1:]  # the first arrival 100 ms late
    assert 97 < sends_per_s(late_start) < 103
    assert sends_per_s([index / 200 for index in range(101)]) == pytest.approx(200)


async def test_the_rate_cap_holds_within_10_percent_at_the_receiver(replay_bus) -> None:
    """Measured on the times the group took each put (the put time every message
    carries), so the receiver's own pauses on a loaded machine do not count."""
    count, rate = 201, 100.0  # 2 s: a late start is spread over twice as many sends
    bus = replay_bus({Journal.PCJ: [record(i) for i in range(count)]})
    put_times_s: list[float] = []
    async with connect(bus.address, queue="RESTORE") as receiver, trio.open_nursery() as nursery:
        nursery.start_soon(jplay, bus, "pcj", "--to", "RESTORE", "--rate", f"{rate:g}/s")
        while len(put_times_s) < count:
            message = await receiver.get(timeout=30)
            put_times_s.append(message.put_time_ns / 1e9)
            await receiver.confirm(message.seq)
    measured = sends_per_s(sorted(put_times_s))  # got by priority when some wait
    assert rate * 0.9 <= measured <= rate * 1.1, measured


# ---------------------------------------------------------------------- interruptions
@pytest.mark.parametrize(
    "journal, stop_signal",
    [("pcj", signal.SIGKILL), ("dlj", signal.SIGKILL), ("pcj", signal.SIGINT)],
    ids=["pcj-sigkill", "dlj-remove-sigkill", "pcj-ctrl-c"],
)
async def test_an_interrupted_replay_resumes_and_delivers_each_record_exactly_once(
    replay_bus, journal, stop_signal
) -> None:
    count = 300
    records = [record(i, target_queue=21) for i in range(count)]
    bus = replay_bus({Journal(journal): records})
    journals = bus.data_dir / "journals"
    extra = ["--remove"] if journal == "dlj" else []
    received: list = []
    seen_enough = trio.Event()

    async with connect(bus.address, queue="RESTORE") as receiver:

        async with trio.open_nursery() as nursery:
            receiving = await nursery.start(receive_confirming, receiver, received, seen_enough, 60)
            process = await trio.lowlevel.open_process(
                # 40/s: the 300 records take 7.5 s, so a receiver slowed by a loaded
                # machine still sees 60 of them long before the replay could finish.
                jplay_command(bus, journal, "--rate", "40/s", "--json", *extra),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            await seen_enough.wait()
            process.send_signal(stop_signal)
            first_status = await process.wait()
            at_stop = len(received)
            if journal == "dlj":  # whatever was removed was stored: in the DQF or received
                remaining = set(journal_seqs(journals, Journal.DLJ))
                store = JournalStore(journals, readonly=True)
                try:
                    in_dqf = {
                        item.extra["headers"]["replay"]["seq"]
                        for _key, item in store.scan(Journal.DQF)
                    }
                finally:
                    store.close()
                removed = {r.seq for r in records} - remaining
                assert removed, "the interrupted run removed some dead letters"
                assert removed <= in_dqf | set(replayed_seqs(received))
            code, summary, _ = await jplay(bus, journal, "--json", *extra)
            receiving.cancel()
        # The rest through the same attachment: a new one right after this one's close
        # could find the queue still attached (QUEUE_BUSY) until the server reads the EOF.
        rest = await take_all(receiver)

    assert at_stop < count, "the first run was stopped mid-way"
    if stop_signal == signal.SIGINT:
        assert first_status == 130
    else:
        assert first_status == -signal.SIGKILL
    assert code == 0
    assert summary["failed"] == 0
    assert summary["sent"] + summary["skipped"] == summary["selected"]
    if journal == "dlj":  # what the first run removed is not even selected again
        assert summary["selected"] == count - len(removed)
    else:
        assert summary["selected"] == count
        assert summary["skipped"] > 0, "the resumed run skipped what the ledger knew was stored"
    received += rest
    assert Counter(replayed_seqs(received)) == Counter(r.seq for r in records)
    if journal == "dlj":
        assert journal_seqs(journals, Journal.DLJ) == []


async def test_a_server_outage_stops_the_replay_and_the_next_run_finishes_it(replay_bus) -> None:
    bus = replay_bus({Journal.PCJ: [record(i) for i in range(10)]})
    bus.kill()
    code, summary, _ = await jplay(bus, "pcj", "--to", "RESTORE", "--json")
    assert code == 1
    assert (summary["sent"], summary["not_attempted"]) == (0, 10)
    assert "cannot reach the server" in summary["stopped"]
    bus.start()
    code, summary, _ = await jplay(bus, "pcj", "--to", "RESTORE", "--json")
    assert code == 0 and summary["sent"] == 10
    assert sorted(replayed_seqs(await drain(bus))) == [SEQ_BASE + i for i in range(10)]


# ---------------------------------------------------------------------- the docs
DOCS = Path(__file__).resolve().parents[2] / "docs" / "journal-tools.md"


def _documented_commands() -> list[list[str]]:
    commands = []
    for line in DOCS.read_text().splitlines():
        line = line.split(" | ")[0].split("  #")[0].strip()
        if line.startswith(("mrs dump ", "mrs jplay ")):
            commands.append(shlex.split(line)[1:])
    return commands


def test_every_documented_command_is_valid(tmp_path) -> None:
    """The worked examples use options that exist and selections that validate."""
    bus_config = load_config(stopped_bus(tmp_path / "bus").config_path)
    parser = build_parser()
    commands = _documented_commands()
    assert len(commands) >= 15
    for argv in commands:
        args = parser.parse_args(argv)
        journal = Journal(args.journal or "saf")  # `dump --client-saf DIR` alone: its SAF
        filter_from_args(args, journal, bus_config, 1, time.time_ns())
        if argv[0] == "jplay":
            assert args.journal in ("pcj", "dlj")


def test_remove_is_refused_on_a_replicated_groups_journals(tmp_path: Path) -> None:
    """A removal written straight into one instance's journals would not reach the
    others (their copies come back after a failover): `jplay --remove` and `pcj
    archive` refuse in one line, by the config or, with `--data-dir` alone, by the
    marks replication leaves; nothing removed."""
    from mrs.replication.replica import POSITION_KEY
    from sim.etcd import write_replicated_config

    config = write_replicated_config(tmp_path, "http://127.0.0.1:1", STANDARD_QUEUES)
    journals = tmp_path / "b" / "journals"
    journals.mkdir(parents=True)
    write_records(journals, Journal.DLJ, [record(1)])
    write_raw(journals, Journal.META, POSITION_KEY.encode(), bytes(16))
    for where in (
        ["--config", str(config), "--group", "1", "--instance", "b"],
        ["--data-dir", str(tmp_path / "b"), "--group", "1", "--address", "127.0.0.1:1"],
    ):
        done = mrs("jplay", *where, "--as", "1.13", "dlj", "--remove")
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            "mrs jplay: --remove: these are a replicated group's journals; a removal written "
            "here would not reach the other instances (their copies come back after a "
            "failover), so replay without --remove"
        ]
        assert journal_seqs(journals, Journal.DLJ) == [record(1).seq]
    write_records(journals, Journal.PCJ, [record(2)])
    archive = mrs(
        "pcj", "archive", "--data-dir", str(tmp_path / "b"), "--group", "1", "--until", "now"
    )
    assert archive.returncode == 2
    assert "pcj archive: these are a replicated group's journals" in archive.stderr
    assert journal_seqs(journals, Journal.PCJ) == [record(2).seq]
