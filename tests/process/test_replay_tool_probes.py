"""What an adversarial probe of `mrs dump` and `mrs jplay` found, held: arguments no
replay can work with (a window beyond the client's cap, a NaN timeout, `--uma DLJ` on
the DLJ), `mrs dump | head`, a damaged replay ledger, entry or key secret, two first
runs racing for the key secret, dead letters an earlier run replayed, and a resumed
replay skipping a long run of records. Real journal files, ledgers and `mrs`
processes, real servers (one test drives the replay engine with a stand-in client)."""

from __future__ import annotations

import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path

import lmdb
import pytest
import trio

from clients import DeliveryMode, Psb, Status, Uma, connect
from journals import Journal, JournalStore, seq_key
from mrs.config.bus import load_config
from mrs.limits import CLIENT_REQUESTS_IN_FLIGHT_MAX
from mrs.offline.selection import RecordFilter, queue_matcher
from mrs.tools.cli import main
from mrs.tools.journal.ledger import LEDGER_DIRNAME, SECRET_FILENAME, STORED, ReplayLedger
from mrs.tools.journal.replay import BATCH_PUTS_MAX, PLAN_CHUNK, Options, Planner, Replayer, Tally
from tests.client_helpers import take_all
from tests.journal_helpers import SEQ_BASE, journal_seqs, record, stopped_bus, write_records


def _jplay_command(bus, journal: str, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "mrs", "jplay", "--config", str(bus.config_path), "--group", "1",
        "--address", bus.address, journal, *args,
    ]  # fmt: skip


async def _jplay(bus, journal: str, *args: str) -> subprocess.CompletedProcess:
    return await trio.run_process(
        _jplay_command(bus, journal, *args), capture_stdout=True, capture_stderr=True, check=False
    )


def record_range(count: int) -> list:
    """`count` records of the shared helper, seqs SEQ_BASE onwards."""
    return [record(i) for i in range(count)]


async def _replayed_seqs(bus, queue: str = "RESTORE") -> Counter:
    """How often each record reached `queue` as a replay (each message confirmed)."""
    async with connect(bus.address, queue=queue) as receiver:
        messages = await take_all(receiver)
    return Counter(message.headers["replay"]["seq"] for message in messages)


# ---------------------------------------------------------------------- usage
@pytest.mark.parametrize(
    "args, problem",
    [
        (["pcj", "--window", str(CLIENT_REQUESTS_IN_FLIGHT_MAX + 1)], "--window must be from 1"),
        (["pcj", "--window", "99999999999"], "--window must be from 1 to"),
        (["pcj", "--timeout", "nan"], "--timeout must be a finite number of seconds"),
        (["pcj", "--timeout", "inf"], "--timeout must be a finite number of seconds"),
        (["pcj", "--since", "0001-01-01"], "--since: '0001-01-01' is out of range"),
        (["dlj", "--uma", "DLJ"], "--uma DLJ with the dlj: a redrive that fails would become"),
    ],
)
def test_an_argument_no_replay_can_work_with_is_refused_up_front(
    tmp_path, capsys, args, problem
) -> None:
    """Before: a window of 99999999999 started a task per 512 of it and never ended,
    one beyond the client's cap had puts refused unsent (EXCEEDQUOTA); a NaN, infinite
    or huge timeout failed every record one by one; and a DLJ redriven with UMA DLJ
    doubled on every run (each failed redrive a second dead letter beside the first)."""
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(1)])
    write_records(bus.data_dir / "journals", Journal.DLJ, [record(1, reason=-228)])
    where = ["--config", str(bus.config_path), "--group", "1", "--address", "127.0.0.1:1"]
    code = main(["jplay", *where, *args])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", err
    assert err.splitlines() == [err.strip()] and problem in err


async def test_the_largest_window_replays_without_refusing_its_own_puts(replay_bus) -> None:
    """`--window 10000` (the client's cap on requests in flight) once put 20 batches of
    512 in flight: 240 beyond the cap were refused unsent and reported as failures."""
    count = CLIENT_REQUESTS_IN_FLIGHT_MAX + 2000
    bus = replay_bus({Journal.PCJ: [record(i, target_queue=21) for i in range(count)]})
    window = str(CLIENT_REQUESTS_IN_FLIGHT_MAX)
    done = await _jplay(bus, "pcj", "--window", window, "--json")
    assert done.returncode == 0, done.stdout.decode()[-500:]
    assert b'"sent": %d, "skipped": 0, "failed": 0' % count in done.stdout
    assert await _replayed_seqs(bus) == Counter(r.seq for r in record_range(count))


# ---------------------------------------------------------------------- dump | head
def test_a_dump_table_read_by_head_ends_quietly_with_status_0(tmp_path) -> None:
    """`mrs dump ... | head` once ended with status 1 (rich's answer to a broken pipe),
    which says corrupt records were found; `--json | head` ended with 0."""
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, record_range(3000))
    for output in ([], ["--json"]):
        command = [sys.executable, "-m", "mrs", "dump", "--data-dir", str(bus.data_dir), "pcj"]
        with subprocess.Popen(
            [*command, *output], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as dump:
            assert dump.stdout is not None and dump.stderr is not None
            dump.stdout.readline()
            dump.stdout.readline()
            dump.stdout.close()  # `head -2` has what it wanted
            assert dump.wait(timeout=60) == 0, output
            assert dump.stderr.read() == b""


def _dump_cpu_s(data_dir: Path, *args: str) -> tuple[str, float]:
    """`mrs dump --data-dir DATA_DIR pcj ARGS`: (stdout, the CPU seconds it used)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "dump", "--data-dir", str(data_dir), "pcj", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert result.returncode == 0, result.stderr
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return result.stdout, cpu_s


def test_a_long_table_streams_about_as_fast_as_json_and_stays_aligned(tmp_path) -> None:
    """rich's Table cost 0.5 ms a row: a table of 60,000 records took 31 s against 1 s
    as JSON lines (a million, 9 minutes at 3 a.m.). Later pages are now written as the
    same text without it; CPU time, not wall time, so a loaded machine does not count."""
    count = 20_000
    bus = stopped_bus(tmp_path / "bus")
    records = record_range(count)
    write_records(bus.data_dir / "journals", Journal.PCJ, records)
    _, json_cpu_s = _dump_cpu_s(bus.data_dir, "--json")
    table, table_cpu_s = _dump_cpu_s(bus.data_dir)
    lines = table.splitlines()
    header, rows = lines[0], lines[1:-1]
    assert len(rows) == count and lines[-1].startswith(f"pcj: {count} records")
    seq_end = header.index("seq") + len("seq")
    assert [int(row[:seq_end]) for row in rows] == [r.seq for r in records]
    target = header.index("target")
    assert {row[target : target + 5] for row in rows} == {"1.10 "}
    assert table_cpu_s < 3 * json_cpu_s, (table_cpu_s, json_cpu_s)


# ---------------------------------------------------------------------- the ledger
async def test_a_damaged_key_secret_is_refused_not_replaced(replay_bus) -> None:
    """Before, a key secret that did not read as hex was silently replaced by a new
    one: every replay got a new idempotency key, and a record whose answer an earlier
    run lost (here: its ledger entry) was stored a second time."""
    records = [record(i, target_queue=21) for i in range(3)]
    bus = replay_bus({Journal.PCJ: records})
    first = await _jplay(bus, "pcj")
    assert first.returncode == 0, first.stderr.decode()
    ledger = bus.data_dir / LEDGER_DIRNAME
    for name in ("data.mdb", "lock.mdb"):  # the outcomes lost: every record in doubt
        (ledger / name).unlink()
    secret = ledger / SECRET_FILENAME
    secret.write_text("not a secret\n")

    again = await _jplay(bus, "pcj")
    assert again.returncode == 1
    assert again.stderr.decode().splitlines() == [
        f"mrs jplay: the replay ledger's key secret {secret} is damaged (not 32 bytes in hex): "
        "restore it from a backup of the data directory; a new one would give each replay a "
        "new idempotency key, and records whose answer was lost in an earlier run would be "
        "stored twice"
    ]
    assert secret.read_text() == "not a secret\n"
    assert await _replayed_seqs(bus) == Counter(r.seq for r in records)  # once each


def _group_with_ledger(tmp_path: Path, count: int):
    """A stopped group whose PCJ holds `count` records, each replayed (its ledger says)."""
    bus = stopped_bus(tmp_path / "bus")
    records = record_range(count)
    write_records(bus.data_dir / "journals", Journal.PCJ, records)
    ledger = ReplayLedger(bus.data_dir)
    for item in records:
        ledger.stage(Journal.PCJ, item.seq, STORED, 1, replay_seq=item.seq, target="1.21")
    ledger.flush()
    ledger.key_secret()
    ledger.close()
    return bus


def _jplay_refusal(bus, *mode: str) -> str:
    """jplay's one line on stderr, after it ended with status 1."""
    command = [sys.executable, "-m", "mrs", "jplay", "--config", str(bus.config_path)]
    result = subprocess.run(
        [*command, "--group", "1", "pcj", *mode], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "replay"])
def test_a_ledger_cut_short_is_refused_in_one_line_not_a_bus_error(tmp_path, dry_run) -> None:
    """The journals were checked in a child before jplay opened them, the ledger was
    not: one cut short (a full disk, a partial copy) killed jplay with SIGBUS."""
    bus = _group_with_ledger(tmp_path, 2000)
    data_file = bus.data_dir / LEDGER_DIRNAME / "data.mdb"
    with open(data_file, "r+b") as cut:
        cut.truncate(data_file.stat().st_size // 3)
    line = _jplay_refusal(bus, *(["--dry-run"] if dry_run else ["--address", "127.0.0.1:1"]))
    assert line.startswith(f"mrs jplay: the replay ledger {data_file} is damaged: "), line
    assert "(keep key-secret)" in line


def test_a_damaged_ledger_entry_is_named_in_one_line(tmp_path) -> None:
    """An entry that is not what a flush writes ended jplay with `unexpected error:
    FormatError:` and nothing else."""
    bus = _group_with_ledger(tmp_path, 10)
    path = bus.data_dir / LEDGER_DIRNAME
    env = lmdb.open(str(path), max_dbs=4)
    with env.begin(write=True, db=env.open_db(b"pcj")) as txn:
        txn.put(seq_key(SEQ_BASE + 3), b"\xc1 not msgpack")
    env.close()
    line = _jplay_refusal(bus, "--dry-run")
    assert line.startswith(
        f"mrs jplay: the replay ledger {path / 'data.mdb'} is damaged: its pcj seq "
        f"{SEQ_BASE + 3}: not a ledger entry"
    ), line


# ---------------------------------------------------------------------- --remove
async def test_remove_deletes_dead_letters_replayed_earlier_as_it_goes(replay_bus) -> None:
    """A --remove run collected the dead letters an earlier run had replayed in a list
    as long as the journal and deleted them only at its end: memory grew with the
    journal, and a run stopped mid-way (here SIGKILL) had deleted none of them."""
    earlier, later = 150, 200
    dead = [record(i, target_queue=21, reason=-228) for i in range(earlier + later)]
    bus = replay_bus({Journal.DLJ: dead})
    journals = bus.data_dir / "journals"
    first = await _jplay(bus, "dlj", "--seq", f"..{SEQ_BASE + earlier - 1}")
    assert first.returncode == 0, first.stderr.decode()
    async with connect(bus.address, queue="RESTORE") as receiver:
        assert len(await take_all(receiver)) == earlier
        process = await trio.lowlevel.open_process(
            _jplay_command(bus, "dlj", "--remove", "--rate", "20/s"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(20):  # a second of the paced run: flushed several times
                message = await receiver.get(timeout=60)
                assert message.headers["replay"]["seq"] >= SEQ_BASE + earlier
                await receiver.confirm(message.seq)
        finally:
            process.kill()
            await process.wait()
    remaining = journal_seqs(journals, Journal.DLJ)
    assert not set(remaining) & {r.seq for r in dead[:earlier]}
    assert len(remaining) >= later - 40  # the paced run was stopped early


# ---------------------------------------------------------------------- a long resume
class _StoringClient:
    """Answers every put STORED: the records replayed before are what this is about."""

    async def put_many(self, items: list) -> list[Psb]:
        await trio.lowlevel.checkpoint()
        return [
            Psb(Status.SUCCESS, Status.STORED, index, Status.NO_UMA) for index in range(len(items))
        ]


async def _replay_watched(bus, selection: RecordFilter) -> tuple[Tally, set]:
    """Replay group 1's PCJ through `_StoringClient` while another task notes, each time
    it runs, how far the planner has read (its last seq): (the tally, those seqs)."""
    store = JournalStore(bus.data_dir / "journals", readonly=True)
    ledger = ReplayLedger(bus.data_dir)
    options = Options(
        journal=Journal.PCJ, group_id=1, address=None, sender=None, to="1.21",
        delivery=DeliveryMode.WF_DQF, uma=Uma.DISC, timeout_s=30.0, rate=None,
        window=BATCH_PUTS_MAX, again=False, remove=False, dry_run=False, json=True,
    )  # fmt: skip
    tally = Tally()
    planner = Planner(store, Journal.PCJ, selection, ledger, options, tally, lambda r: "1.21",
                      lambda key: None)  # fmt: skip
    replayer = Replayer(_StoringClient(), planner, ledger, store, options, tally)
    read_up_to: set = set()
    try:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                while True:
                    read_up_to.add(planner.after_seq)
                    await trio.lowlevel.checkpoint()

            nursery.start_soon(watch)
            await replayer.run()
            nursery.cancel_scope.cancel()
    finally:
        ledger.close()
        store.close()
    return tally, read_up_to


async def test_records_replayed_before_are_skipped_with_the_connection_serviced(
    tmp_path,
) -> None:
    """A resumed replay skipped every record an earlier run stored in one call: for a
    journal of millions the event loop stood still for tens of seconds, neither
    flushing the ledger nor reading the connection, and the client's heartbeat then
    counted the server silent and dropped it; every re-run stopped at the same place."""
    count = 12 * PLAN_CHUNK
    bus = _group_with_ledger(tmp_path, count - 1)  # the last record was never replayed
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(count - 1)])
    tally, read_up_to = await _replay_watched(bus, RecordFilter(journal=Journal.PCJ))
    assert (tally.skipped, tally.sent) == (count - 1, 1)
    between = {seq for seq in read_up_to if seq is not None and seq < SEQ_BASE + count - 1}
    assert len(between) >= 3, sorted(between)  # other tasks ran between the chunks


async def test_a_selection_few_records_match_is_read_with_the_connection_serviced(
    tmp_path,
) -> None:
    """A chunk of the plan read on until PLAN_CHUNK records matched the selection: one
    matching record in millions kept the event loop from the connection for as long
    as reading them all took, with the same end as above."""
    count = 12 * PLAN_CHUNK
    bus = stopped_bus(tmp_path / "bus")
    records = [record(i, target_queue=21 if i == count - 1 else 10) for i in range(count)]
    write_records(bus.data_dir / "journals", Journal.PCJ, records)
    config = load_config(bus.config_path)
    selection = RecordFilter(
        journal=Journal.PCJ, targets=queue_matcher(["RESTORE"], "--target", config, 1)
    )
    tally, read_up_to = await _replay_watched(bus, selection)
    assert (tally.selected, tally.sent) == (1, 1)
    between = {seq for seq in read_up_to if seq is not None and seq < SEQ_BASE + count - 1}
    assert len(between) >= 3, sorted(between)  # other tasks ran between the chunks


# ---------------------------------------------------------------------- two first runs
_FIRST_KEY_USE = """
import sys
from pathlib import Path
from mrs.tools.journal.ledger import ReplayLedger
ledger = ReplayLedger(Path(sys.argv[1]))
print("ready", flush=True)
sys.stdin.readline()
print(ledger.key_secret().hex(), flush=True)
"""


def test_two_first_runs_on_one_data_directory_share_one_key_secret(tmp_path) -> None:
    """Two jplays starting on a data directory that has no secret yet once each made
    one and kept its own (the last rename won the file, or the second rename found
    the first's temporary file gone): their keys for the same record differed, so
    the server stored it once per jplay."""
    for round_index in range(10):
        data_dir = tmp_path / f"g{round_index}"
        data_dir.mkdir()
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", _FIRST_KEY_USE, str(data_dir)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for run in runs:
            assert run.stdout is not None and run.stdout.readline() == "ready\n"
        for run in runs:  # both at once: neither has found a secret yet
            assert run.stdin is not None
            run.stdin.write("go\n")
            run.stdin.flush()
        secrets = set()
        for run in runs:
            out, err = run.communicate(timeout=60)
            assert run.returncode == 0, err
            secrets.add(out.strip())
        on_disk = (data_dir / LEDGER_DIRNAME / SECRET_FILENAME).read_text().strip()
        assert secrets == {on_disk}, round_index
